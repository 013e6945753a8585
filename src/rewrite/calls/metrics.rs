//! What `/metrics` and `/ready` read from PostgreSQL: the `queen` views of
//! 011_log_stats (every tenant: the engine's role sees them all), and
//! whether the schema is there.

use super::{column, Call, CallSpec, DecodeError, FromRow, Row};
use tokio_postgres::types::{ToSql, Type};
use uuid::Uuid;

pub const QUEUE_DEPTH: CallSpec = CallSpec {
    name: "qw_metrics_queue_depth",
    sql: "SELECT tenant_id, queue, messages, pending, dead_lettered FROM queen.queue_depth ORDER BY tenant_id, queue",
    params: &[],
    columns: &[
        column("tenant_id", Type::UUID),
        column("queue", Type::TEXT),
        column("messages", Type::INT8),
        column("pending", Type::INT8),
        column("dead_lettered", Type::INT8),
    ],
};

pub struct QueueDepth;

impl Call for QueueDepth {
    const SPEC: &'static CallSpec = &QUEUE_DEPTH;
    type Row = DepthRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        Vec::new()
    }
}

pub struct DepthRow {
    pub tenant_id: Option<Uuid>,
    pub queue: Option<String>,
    pub messages: Option<i64>,
    pub pending: Option<i64>,
    pub dead_lettered: Option<i64>,
}

impl FromRow for DepthRow {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        Ok(DepthRow {
            tenant_id: row.get("tenant_id")?,
            queue: row.get("queue")?,
            messages: row.get("messages")?,
            pending: row.get("pending")?,
            dead_lettered: row.get("dead_lettered")?,
        })
    }
}

pub const GROUP_LAG: CallSpec = CallSpec {
    name: "qw_metrics_group_lag",
    sql: "SELECT tenant_id, queue, consumer_group, lag FROM queen.group_lag ORDER BY tenant_id, queue, consumer_group",
    params: &[],
    columns: &[
        column("tenant_id", Type::UUID),
        column("queue", Type::TEXT),
        column("consumer_group", Type::TEXT),
        column("lag", Type::INT8),
    ],
};

pub struct GroupLag;

impl Call for GroupLag {
    const SPEC: &'static CallSpec = &GROUP_LAG;
    type Row = LagRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        Vec::new()
    }
}

pub struct LagRow {
    pub tenant_id: Option<Uuid>,
    pub queue: Option<String>,
    pub consumer_group: Option<String>,
    pub lag: Option<i64>,
}

impl FromRow for LagRow {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        Ok(LagRow {
            tenant_id: row.get("tenant_id")?,
            queue: row.get("queue")?,
            consumer_group: row.get("consumer_group")?,
            lag: row.get("lag")?,
        })
    }
}

/// The schema is applied when the stats views (011) and the maintenance
/// leases (029) exist.
pub const SCHEMA_APPLIED: CallSpec = CallSpec {
    name: "qw_metrics_schema_applied",
    sql: "SELECT (to_regclass('queen.queue_depth') IS NOT NULL AND to_regclass('queen.maintenance_leases') IS NOT NULL) AS schema_applied",
    params: &[],
    columns: &[column("schema_applied", Type::BOOL)],
};

pub struct SchemaApplied;

impl Call for SchemaApplied {
    const SPEC: &'static CallSpec = &SCHEMA_APPLIED;
    type Row = AppliedRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        Vec::new()
    }
}

pub struct AppliedRow {
    pub schema_applied: Option<bool>,
}

impl FromRow for AppliedRow {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        Ok(AppliedRow {
            schema_applied: row.get("schema_applied")?,
        })
    }
}
