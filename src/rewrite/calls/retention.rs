//! The retention and cleanup tasks' calls (`sql/procedures/006`), run by
//! the elected maintainer on its own connection (`crate::engine::retention`):
//! the work list, one bounded step per partition, the cleanup step, the
//! history record of each pass, and the retained-bytes slow lane (028).

use super::{column, Call, CallSpec, DecodeError, FromRow, Row};
use tokio_postgres::types::{ToSql, Type};
use uuid::Uuid;

pub const WORK: CallSpec = CallSpec {
    name: "qw_log_retention_work_v1",
    sql: "SELECT partition_id FROM queen.log_retention_work_v1(p_after => $1, p_limit => $2)",
    params: &[Type::INT8, Type::INT4],
    columns: &[column("partition_id", Type::INT8)],
};

/// Up to `limit` partitions after id `after` whose oldest segment is due.
pub struct Work {
    pub after: i64,
    pub limit: i32,
}

impl Call for Work {
    const SPEC: &'static CallSpec = &WORK;
    type Row = WorkRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![&self.after, &self.limit]
    }
}

pub struct WorkRow {
    pub partition_id: i64,
}

impl FromRow for WorkRow {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        Ok(WorkRow {
            partition_id: row.get("partition_id")?,
        })
    }
}

pub const STEP: CallSpec = CallSpec {
    name: "qw_log_retention_step_v1",
    sql: "SELECT segments, messages, bytes, expired, more, locked FROM queen.log_retention_step_v1(p_partition_id => $1, p_limit => $2)",
    params: &[Type::INT8, Type::INT4],
    columns: &[
        column("segments", Type::INT4),
        column("messages", Type::INT8),
        column("bytes", Type::INT8),
        column("expired", Type::INT8),
        column("more", Type::BOOL),
        column("locked", Type::BOOL),
    ],
};

/// Deletes at most `limit` due segments from the front of one partition.
pub struct Step {
    pub partition_id: i64,
    pub limit: i32,
}

impl Call for Step {
    const SPEC: &'static CallSpec = &STEP;
    type Row = StepRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![&self.partition_id, &self.limit]
    }
}

/// What one step deleted; `more` when it stopped at its limit, `locked`
/// when a push held the partition and the step did nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StepRow {
    pub segments: i32,
    pub messages: i64,
    pub bytes: i64,
    pub expired: i64,
    pub more: bool,
    pub locked: bool,
}

impl FromRow for StepRow {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        Ok(StepRow {
            segments: row.get("segments")?,
            messages: row.get("messages")?,
            bytes: row.get("bytes")?,
            expired: row.get("expired")?,
            more: row.get("more")?,
            locked: row.get("locked")?,
        })
    }
}

pub const CLEANUP_STEP: CallSpec = CallSpec {
    name: "qw_log_partition_cleanup_step_v1",
    sql: "SELECT queen.log_partition_cleanup_step_v1(p_cleanup_age_seconds => $1, p_limit => $2) AS deleted",
    params: &[Type::INT4, Type::INT4],
    columns: &[column("deleted", Type::INT4)],
};

/// Deletes at most `limit` partitions empty and idle for `age_seconds`.
pub struct CleanupStep {
    pub age_seconds: i32,
    pub limit: i32,
}

impl Call for CleanupStep {
    const SPEC: &'static CallSpec = &CLEANUP_STEP;
    type Row = Deleted;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![&self.age_seconds, &self.limit]
    }
}

pub struct Deleted {
    pub deleted: i32,
}

impl FromRow for Deleted {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        Ok(Deleted {
            deleted: row.get("deleted")?,
        })
    }
}

pub const RECORD: CallSpec = CallSpec {
    name: "qw_log_retention_record_v1",
    sql: "SELECT queen.log_retention_record_v1(p_task => $1, p_holder => $2, p_duration_ms => $3, p_partitions => $4, p_segments => $5, p_messages => $6, p_bytes => $7, p_expired => $8) AS id",
    params: &[
        Type::TEXT,
        Type::TEXT,
        Type::INT8,
        Type::INT4,
        Type::INT8,
        Type::INT8,
        Type::INT8,
        Type::INT8,
    ],
    columns: &[column("id", Type::INT8)],
};

/// One pass of `task` (`retention` or `cleanup`) into
/// `queen.retention_history`.
pub struct Record<'a> {
    pub task: &'static str,
    pub holder: &'a str,
    pub duration_ms: i64,
    pub partitions: i32,
    pub segments: i64,
    pub messages: i64,
    pub bytes: i64,
    pub expired: i64,
}

impl Call for Record<'_> {
    const SPEC: &'static CallSpec = &RECORD;
    type Row = ();
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![
            &self.task,
            &self.holder,
            &self.duration_ms,
            &self.partitions,
            &self.segments,
            &self.messages,
            &self.bytes,
            &self.expired,
        ]
    }
}

pub const RETAINED_BYTES_STEP: CallSpec = CallSpec {
    name: "qw_log_retained_bytes_step_v1",
    sql: "SELECT last_queue_id, queues FROM queen.log_retained_bytes_step_v1(p_after => $1, p_limit => $2)",
    params: &[Type::UUID, Type::INT4],
    columns: &[
        column("last_queue_id", Type::UUID),
        column("queues", Type::INT4),
    ],
};

/// Measures the retained bytes of up to `limit` queues after `after`
/// (`None`: from the first).
pub struct RetainedBytesStep {
    pub after: Option<Uuid>,
    pub limit: i32,
}

impl Call for RetainedBytesStep {
    const SPEC: &'static CallSpec = &RETAINED_BYTES_STEP;
    type Row = RetainedBytesRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![&self.after, &self.limit]
    }
}

pub struct RetainedBytesRow {
    pub last_queue_id: Option<Uuid>,
    pub queues: i32,
}

impl FromRow for RetainedBytesRow {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        Ok(RetainedBytesRow {
            last_queue_id: row.get("last_queue_id")?,
            queues: row.get("queues")?,
        })
    }
}
