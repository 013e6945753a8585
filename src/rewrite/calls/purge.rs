//! The tenant purge (031): one bounded step of `PURGE TENANT`.

use super::{column, Call, CallSpec, DecodeError, FromRow, Row};
use tokio_postgres::types::{ToSql, Type};
use uuid::Uuid;

pub const STEP: CallSpec = CallSpec {
    name: "qw_tenant_purge_step_v1",
    sql: "SELECT kv_keys, timers, queues, partitions, segments, messages, dlq, done FROM queen.tenant_purge_step_v1(p_tenant => $1, p_batch => $2)",
    params: &[Type::UUID, Type::INT4],
    columns: &[
        column("kv_keys", Type::INT8),
        column("timers", Type::INT8),
        column("queues", Type::INT8),
        column("partitions", Type::INT8),
        column("segments", Type::INT8),
        column("messages", Type::INT8),
        column("dlq", Type::INT8),
        column("done", Type::BOOL),
    ],
};

pub struct PurgeStep {
    pub tenant: Uuid,
    pub batch: i32,
}

impl Call for PurgeStep {
    const SPEC: &'static CallSpec = &STEP;
    type Row = PurgeStepRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![&self.tenant, &self.batch]
    }
}

/// What one step removed; `done` when nothing of the tenant is left.
#[derive(Debug, Default, Clone, Copy)]
pub struct PurgeStepRow {
    pub kv_keys: i64,
    pub timers: i64,
    pub queues: i64,
    pub partitions: i64,
    pub segments: i64,
    pub messages: i64,
    pub dlq: i64,
    pub done: bool,
}

impl FromRow for PurgeStepRow {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        let n = |name: &str| -> Result<i64, DecodeError> {
            Ok(row.get::<Option<i64>>(name)?.unwrap_or(0))
        };
        Ok(PurgeStepRow {
            kv_keys: n("kv_keys")?,
            timers: n("timers")?,
            queues: n("queues")?,
            partitions: n("partitions")?,
            segments: n("segments")?,
            messages: n("messages")?,
            dlq: n("dlq")?,
            done: row.get::<Option<bool>>("done")?.unwrap_or(false),
        })
    }
}
