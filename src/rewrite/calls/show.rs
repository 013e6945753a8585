//! SHOW QUEUES / PARTITIONS / GROUPS / DLQ: the `log_show_*_v1`,
//! `consumer_groups_v1` and `get_dlq_messages_v1` readers. Their columns come back in the order of
//! the statement's result columns (`dialect/show.rs`); every cell but the
//! DLQ's may be NULL and is passed on as such.

use super::{column, Call, CallSpec, DecodeError, FromRow, Row};
use bytes::Bytes;
use std::time::SystemTime;
use tokio_postgres::types::{ToSql, Type};
use uuid::Uuid;

pub const QUEUES: CallSpec = CallSpec {
    name: "qw_show_queues_v1",
    sql: "SELECT queue, partitions, messages, pending, dead_lettered, created_at FROM queen.log_show_queues_v1(p_tenant => $1)",
    params: &[Type::UUID],
    columns: &[
        column("queue", Type::TEXT),
        column("partitions", Type::INT8),
        column("messages", Type::INT8),
        column("pending", Type::INT8),
        column("dead_lettered", Type::INT8),
        column("created_at", Type::TIMESTAMPTZ),
    ],
};

pub struct ShowQueues {
    pub tenant: Uuid,
}

impl Call for ShowQueues {
    const SPEC: &'static CallSpec = &QUEUES;
    type Row = QueueRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![&self.tenant]
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct QueueRow {
    pub queue: Option<String>,
    pub partitions: Option<i64>,
    pub messages: Option<i64>,
    pub pending: Option<i64>,
    pub dead_lettered: Option<i64>,
    pub created_at: Option<SystemTime>,
}

impl FromRow for QueueRow {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        Ok(QueueRow {
            queue: row.get("queue")?,
            partitions: row.get("partitions")?,
            messages: row.get("messages")?,
            pending: row.get("pending")?,
            dead_lettered: row.get("dead_lettered")?,
            created_at: row.get("created_at")?,
        })
    }
}

pub const PARTITIONS: CallSpec = CallSpec {
    name: "qw_show_partitions_v1",
    sql: "SELECT partition_name, messages, last_offset, last_write_at FROM queen.log_show_partitions_v1(p_queue => $1, p_tenant => $2)",
    params: &[Type::TEXT, Type::UUID],
    columns: &[
        column("partition_name", Type::TEXT),
        column("messages", Type::INT8),
        column("last_offset", Type::INT8),
        column("last_write_at", Type::TIMESTAMPTZ),
    ],
};

pub struct ShowPartitions<'a> {
    pub queue: &'a str,
    pub tenant: Uuid,
}

impl Call for ShowPartitions<'_> {
    const SPEC: &'static CallSpec = &PARTITIONS;
    type Row = PartitionRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![&self.queue, &self.tenant]
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct PartitionRow {
    pub partition_name: Option<String>,
    pub messages: Option<i64>,
    pub last_offset: Option<i64>,
    pub last_write_at: Option<SystemTime>,
}

impl FromRow for PartitionRow {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        Ok(PartitionRow {
            partition_name: row.get("partition_name")?,
            messages: row.get("messages")?,
            last_offset: row.get("last_offset")?,
            last_write_at: row.get("last_write_at")?,
        })
    }
}

pub const GROUPS: CallSpec = CallSpec {
    name: "qw_consumer_groups_v2",
    sql: "SELECT queue, consumer_group, partitions, lag, oldest_pending_at, leased_partitions, time_lag_seconds, last_claimed_at, state, group_type FROM queen.consumer_groups_v2(p_queue => $1, p_tenant => $2)",
    params: &[Type::TEXT, Type::UUID],
    columns: &[
        column("queue", Type::TEXT),
        column("consumer_group", Type::TEXT),
        column("partitions", Type::INT8),
        column("lag", Type::INT8),
        column("oldest_pending_at", Type::TIMESTAMPTZ),
        column("leased_partitions", Type::INT8),
        column("time_lag_seconds", Type::INT8),
        column("last_claimed_at", Type::TIMESTAMPTZ),
        column("state", Type::TEXT),
        column("group_type", Type::TEXT),
    ],
};

pub struct ShowGroups<'a> {
    /// `None`: every queue of the tenant.
    pub queue: Option<&'a str>,
    pub tenant: Uuid,
}

impl Call for ShowGroups<'_> {
    const SPEC: &'static CallSpec = &GROUPS;
    type Row = GroupRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![&self.queue, &self.tenant]
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct GroupRow {
    pub queue: Option<String>,
    pub consumer_group: Option<String>,
    pub partitions: Option<i64>,
    pub lag: Option<i64>,
    pub oldest_pending_at: Option<SystemTime>,
    pub leased_partitions: Option<i64>,
    pub time_lag_seconds: Option<i64>,
    pub last_claimed_at: Option<SystemTime>,
    /// `Stable`, `Lagging` or `Dead` (014_consumer_groups).
    pub state: Option<String>,
    /// `ordered` or `shared` (032_log_shared).
    pub group_type: Option<String>,
}

impl FromRow for GroupRow {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        Ok(GroupRow {
            queue: row.get("queue")?,
            consumer_group: row.get("consumer_group")?,
            partitions: row.get("partitions")?,
            lag: row.get("lag")?,
            oldest_pending_at: row.get("oldest_pending_at")?,
            leased_partitions: row.get("leased_partitions")?,
            time_lag_seconds: row.get("time_lag_seconds")?,
            last_claimed_at: row.get("last_claimed_at")?,
            state: row.get("state")?,
            group_type: row.get("group_type")?,
        })
    }
}

pub const DLQ: CallSpec = CallSpec {
    name: "qw_show_dlq_v1",
    sql: "SELECT message_offset, partition_name, consumer_group, reason, retry_count, failed_at, base_offset, blob FROM queen.get_dlq_messages_v1(p_queue => $1, p_limit => $2, p_tenant => $3)",
    params: &[Type::TEXT, Type::INT4, Type::UUID],
    columns: &[
        column("message_offset", Type::INT8),
        column("partition_name", Type::TEXT),
        column("consumer_group", Type::TEXT),
        column("reason", Type::TEXT),
        column("retry_count", Type::INT4),
        column("failed_at", Type::TIMESTAMPTZ),
        column("base_offset", Type::INT8),
        column("blob", Type::BYTEA),
    ],
};

pub struct ShowDlq<'a> {
    pub queue: &'a str,
    pub limit: i32,
    pub tenant: Uuid,
}

impl Call for ShowDlq<'_> {
    const SPEC: &'static CallSpec = &DLQ;
    type Row = DlqRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![&self.queue, &self.limit, &self.tenant]
    }
}

/// A dead-lettered message: its segment, from which the engine takes the
/// frame at `message_offset`.
#[derive(Debug, Clone, PartialEq)]
pub struct DlqRow {
    pub message_offset: i64,
    pub partition_name: String,
    pub consumer_group: String,
    pub reason: Option<String>,
    pub retry_count: i32,
    pub failed_at: Option<SystemTime>,
    pub base_offset: i64,
    pub blob: Bytes,
}

impl FromRow for DlqRow {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        Ok(DlqRow {
            message_offset: row.get("message_offset")?,
            partition_name: row.get("partition_name")?,
            consumer_group: row.get("consumer_group")?,
            reason: row.get("reason")?,
            retry_count: row.get("retry_count")?,
            failed_at: row.get("failed_at")?,
            base_offset: row.get("base_offset")?,
            blob: row.bytes("blob")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rewrite::dialect::{oid, show};

    /// The readers' columns are the statements' own, in order, by type
    /// (SHOW QUEUES' last column, `storage`, is the engine's: 030).
    #[test]
    fn reader_columns_match_the_statements_columns_by_type() {
        let queues = &show::QUEUES_COLUMNS[..show::QUEUES_COLUMNS.len() - 1];
        assert_eq!(show::QUEUES_COLUMNS.last().map(|c| c.name), Some("storage"));
        for (spec, statement) in [
            (&QUEUES, queues),
            (&PARTITIONS, show::PARTITIONS_COLUMNS),
            (&GROUPS, show::GROUPS_COLUMNS),
        ] {
            let types: Vec<u32> = spec.columns.iter().map(|c| c.ty.oid()).collect();
            let expected: Vec<u32> = statement.iter().map(|c| c.type_oid).collect();
            assert_eq!(types, expected, "{}", spec.name);
        }
        assert_eq!(DLQ.columns[0].ty.oid(), oid::INT8);
    }
}
