//! The consumer-groups surface (`sql/procedures/014_consumer_groups.sql`):
//! one group's detail per partition (`consumer_group_detail_v1`), the
//! lagging partitions (`lagging_partitions_v1`) and the subscription update
//! (`consumer_group_subscribe_v1`). The group list with its
//! state is SHOW GROUPS (`show::GROUPS`). Columns come back in the order of
//! the statements' own (`dialect/groups.rs`).

use super::declare::calls;
use std::time::SystemTime;
use uuid::Uuid;

calls! {
    pub const DETAIL = "qw_consumer_group_detail_v1" {
        SELECT * FROM queen.consumer_group_detail_v1;
        pub struct Detail<'a> {
            queue: &'a str = TEXT,
            group: &'a str = TEXT,
            tenant: Uuid = UUID,
        }
        #[derive(Debug, Clone, PartialEq)]
        pub struct DetailRow {
            partition_name: Option<String> = TEXT,
            cursor_offset: Option<i64> = INT8,
            last_offset: Option<i64> = INT8,
            lag: Option<i64> = INT8,
            oldest_pending_at: Option<SystemTime> = TIMESTAMPTZ,
            lease_expires_at: Option<SystemTime> = TIMESTAMPTZ,
            lease_from: Option<i64> = INT8,
            lease_to: Option<i64> = INT8,
            retry_count: Option<i32> = INT4,
            blocked_until: Option<SystemTime> = TIMESTAMPTZ,
            last_claimed_at: Option<SystemTime> = TIMESTAMPTZ,
        }
    }

    pub const SUBSCRIBE = "qw_consumer_group_subscribe_v1" {
        SELECT queen.consumer_group_subscribe_v1;
        /// ALTER GROUP … SUBSCRIBE FROM, with its names and time bound.
        pub struct Subscribe {
            queue: String = TEXT,
            group: String = TEXT,
            mode: &'static str = TEXT,
            /// Timestamp text, cast by PostgreSQL.
            at: Option<String> = TEXT::timestamptz,
            tenant: Uuid = UUID,
        }
        row () { cursors_kept: INT8 }
    }

    pub const LAGGING = "qw_lagging_partitions_v1" {
        SELECT * FROM queen.lagging_partitions_v1;
        pub struct Lagging<'a> {
            queue: &'a str = TEXT,
            /// `None`: every group of the queue.
            group: Option<&'a str> = TEXT,
            over_seconds: i64 = INT8,
            tenant: Uuid = UUID,
        }
        #[derive(Debug, Clone, PartialEq)]
        pub struct LaggingRow {
            consumer_group: Option<String> = TEXT,
            partition_name: Option<String> = TEXT,
            lag: Option<i64> = INT8,
            oldest_pending_at: Option<SystemTime> = TIMESTAMPTZ,
            time_lag_seconds: Option<i64> = INT8,
        }
    }
}
