//! What `/metrics` and `/ready` read from PostgreSQL, as queenwire's own
//! role (every tenant): queue depth for the first queues in (tenant,
//! queue) order, group lag (`queen.group_lag`), how many queues there are,
//! and whether the schema is there.

use super::{column, Call, CallSpec, DecodeError, FromRow, Row};
use tokio_postgres::types::{ToSql, Type};
use uuid::Uuid;

/// `queen.queue_depth`'s numbers (the expressions of
/// `queen.log_show_queues_v1`, 010_log_admin) for the first `$1` queues
/// only: the view computes every queue of every tenant before any LIMIT
/// applies (about 23 µs a queue: 0.23 s for 10,000), this reads `$1` of
/// them through the (tenant_id, name) index (1.7 ms for 1,000 of 10,000).
pub const QUEUE_DEPTH: CallSpec = CallSpec {
    name: "qw_metrics_queue_depth",
    sql: "SELECT q.tenant_id, q.name::TEXT AS queue, (SELECT COALESCE(sum(GREATEST(p.last_offset - p.first_offset + 1, 0)), 0)::BIGINT FROM queen.log_partitions p WHERE p.queue_id = q.id) AS messages, queen.log_queue_pending_v1(p_queue_id => q.id, p_tenant => q.tenant_id) AS pending, (SELECT count(*) FROM queen.log_partitions p JOIN queen.log_dlq d ON d.partition_id = p.id WHERE p.queue_id = q.id) AS dead_lettered FROM (SELECT id, tenant_id, name FROM queen.queues ORDER BY tenant_id, name LIMIT $1) q ORDER BY q.tenant_id, q.name",
    params: &[Type::INT8],
    columns: &[
        column("tenant_id", Type::UUID),
        column("queue", Type::TEXT),
        column("messages", Type::INT8),
        column("pending", Type::INT8),
        column("dead_lettered", Type::INT8),
    ],
};

pub struct QueueDepth {
    pub limit: i64,
}

impl Call for QueueDepth {
    const SPEC: &'static CallSpec = &QUEUE_DEPTH;
    type Row = DepthRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![&self.limit]
    }
}

pub const QUEUE_COUNT: CallSpec = CallSpec {
    name: "qw_metrics_queue_count",
    sql: "SELECT count(*) AS queues FROM queen.queues",
    params: &[],
    columns: &[column("queues", Type::INT8)],
};

pub struct QueueCount;

impl Call for QueueCount {
    const SPEC: &'static CallSpec = &QUEUE_COUNT;
    type Row = CountRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        Vec::new()
    }
}

pub struct CountRow {
    pub queues: Option<i64>,
}

impl FromRow for CountRow {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        Ok(CountRow {
            queues: row.get("queues")?,
        })
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

/// One process's counters of one minute into `queen.worker_metrics` and
/// `queen.queue_ops_metrics` (019_worker_metrics).
pub const FLUSH: CallSpec = CallSpec {
    name: "qw_metrics_flush_v1",
    sql: "SELECT queen.metrics_flush_v1(p_hostname => $1, p_pid => $2, p_bucket => $3, p_worker => $4::text::jsonb, p_queues => $5::text::jsonb) AS queues",
    params: &[Type::TEXT, Type::INT4, Type::TIMESTAMPTZ, Type::TEXT, Type::TEXT],
    columns: &[column("queues", Type::INT4)],
};

pub struct Flush<'a> {
    pub hostname: &'a str,
    pub pid: i32,
    pub bucket: std::time::SystemTime,
    /// A JSON object of `worker_metrics` columns.
    pub worker: String,
    /// A JSON array of `{tenant, queue, <counters>}`.
    pub queues: String,
}

impl Call for Flush<'_> {
    const SPEC: &'static CallSpec = &FLUSH;
    type Row = ();
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![
            &self.hostname,
            &self.pid,
            &self.bucket,
            &self.worker,
            &self.queues,
        ]
    }
}

/// The elected metrics rollup (folds the partition counters' deltas,
/// prunes old metrics rows): the number of deltas folded.
pub const ROLLUP: CallSpec = CallSpec {
    name: "qw_metrics_rollup_v1",
    sql: "SELECT queen.metrics_rollup_v1(p_keep => make_interval(days => $1), p_batch => $2) AS folded",
    params: &[Type::INT4, Type::INT4],
    columns: &[column("folded", Type::INT4)],
};

pub struct Rollup {
    pub keep_days: i32,
    pub batch: i32,
}

pub struct FoldedRow {
    pub folded: Option<i32>,
}

impl FromRow for FoldedRow {
    fn from_row(row: &Row<'_>) -> Result<FoldedRow, DecodeError> {
        Ok(FoldedRow {
            folded: row.get("folded")?,
        })
    }
}

impl Call for Rollup {
    const SPEC: &'static CallSpec = &ROLLUP;
    type Row = FoldedRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![&self.keep_days, &self.batch]
    }
}
