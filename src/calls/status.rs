//! SHOW STATUS: `status_v1` (015_status). Columns in the statement's order.

use super::declare::calls;
use super::{DecodeError, FromRow, Jsonb, Row};
use uuid::Uuid;

calls! {
    pub const STATUS = "qw_status_v1" {
        SELECT * FROM queen.status_v1;
        pub struct Status {
            minutes: i32 = INT4,
            tenant: Uuid = UUID,
        }
        row StatusRow {
            queues: INT8,
            partitions: INT8,
            consumer_groups: INT8,
            messages: INT8,
            pending: INT8,
            processing: INT8,
            dead_lettered: INT8,
            active_leases: INT8,
            pushed_last_minute: INT8,
            throughput: JSONB,
        }
    }
}

/// The counts, in the statement's column order, then the throughput JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusRow {
    pub counts: Vec<Option<i64>>,
    pub throughput: Option<String>,
}

impl FromRow for StatusRow {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        let mut counts = Vec::with_capacity(STATUS.columns.len() - 1);
        for c in &STATUS.columns[..STATUS.columns.len() - 1] {
            counts.push(row.get(c.name)?);
        }
        let throughput: Option<Jsonb> = row.get("throughput")?;
        Ok(StatusRow {
            counts,
            throughput: throughput.map(|j| j.0),
        })
    }
}
