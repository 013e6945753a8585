//! SHOW QUEUES / PARTITIONS / GROUPS / DLQ: the `log_show_*_v1`,
//! `consumer_groups_v1` and `get_dlq_messages_v1` readers. Their columns come back in the order of
//! the statement's result columns (`dialect/show.rs`); every cell but the
//! DLQ's may be NULL and is passed on as such.

use super::declare::calls;
use bytes::Bytes;
use std::time::SystemTime;
use uuid::Uuid;

calls! {
    pub const QUEUES = "qw_show_queues_v1" {
        SELECT * FROM queen.log_show_queues_v1;
        pub struct ShowQueues {
            tenant: Uuid = UUID,
        }
        #[derive(Debug, Clone, PartialEq)]
        pub struct QueueRow {
            queue: Option<String> = TEXT,
            partitions: Option<i64> = INT8,
            messages: Option<i64> = INT8,
            pending: Option<i64> = INT8,
            dead_lettered: Option<i64> = INT8,
            created_at: Option<SystemTime> = TIMESTAMPTZ,
        }
    }

    pub const PARTITIONS = "qw_show_partitions_v1" {
        SELECT * FROM queen.log_show_partitions_v1;
        pub struct ShowPartitions<'a> {
            queue: &'a str = TEXT,
            tenant: Uuid = UUID,
        }
        #[derive(Debug, Clone, PartialEq)]
        pub struct PartitionRow {
            partition_name: Option<String> = TEXT,
            messages: Option<i64> = INT8,
            last_offset: Option<i64> = INT8,
            last_write_at: Option<SystemTime> = TIMESTAMPTZ,
        }
    }

    pub const GROUPS = "qw_consumer_groups_v2" {
        SELECT * FROM queen.consumer_groups_v2;
        pub struct ShowGroups<'a> {
            /// `None`: every queue of the tenant.
            queue: Option<&'a str> = TEXT,
            tenant: Uuid = UUID,
        }
        #[derive(Debug, Clone, PartialEq)]
        pub struct GroupRow {
            queue: Option<String> = TEXT,
            consumer_group: Option<String> = TEXT,
            partitions: Option<i64> = INT8,
            lag: Option<i64> = INT8,
            oldest_pending_at: Option<SystemTime> = TIMESTAMPTZ,
            leased_partitions: Option<i64> = INT8,
            time_lag_seconds: Option<i64> = INT8,
            last_claimed_at: Option<SystemTime> = TIMESTAMPTZ,
            /// `Stable`, `Lagging` or `Dead` (014_consumer_groups).
            state: Option<String> = TEXT,
            /// `ordered` or `shared` (032_log_shared).
            group_type: Option<String> = TEXT,
        }
    }

    pub const DLQ = "qw_show_dlq_v1" {
        SELECT * FROM queen.get_dlq_messages_v1;
        pub struct ShowDlq<'a> {
            queue: &'a str = TEXT,
            limit: i32 = INT4,
            tenant: Uuid = UUID,
        }
        /// A dead-lettered message: its segment, from which the engine takes the
        /// frame at `message_offset` (none when retention had removed the
        /// segment before the message was dead-lettered).
        #[derive(Debug, Clone, PartialEq)]
        pub struct DlqRow {
            message_offset: i64 = INT8,
            partition_name: String = TEXT,
            consumer_group: String = TEXT,
            reason: Option<String> = TEXT,
            retry_count: i32 = INT4,
            failed_at: Option<SystemTime> = TIMESTAMPTZ,
            base_offset: Option<i64> = INT8,
            blob: Bytes = BYTEA or default,
        }
    }
}
