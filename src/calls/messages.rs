//! The messages surface (`sql/procedures/016_messages.sql`): browsing
//! without leasing (`log_browse_v2`, `log_browse_message_v2`), which return
//! whole segments with the group's consumer state beside them (the engine
//! decodes the frames and decides each message's state), and the first half
//! of REPLAY DLQ (`dlq_replay_take_v1`; the second is an ordinary push).

use super::declare::calls;
use super::{DecodeError, FromRow, Row};
use bytes::Bytes;
use std::time::SystemTime;
use uuid::Uuid;

calls! {
    pub const BROWSE = "qw_browse_v2" {
        SELECT * FROM queen.log_browse_v2;
        pub struct Browse<'a> {
            queue: &'a str = TEXT,
            partition: Option<&'a str> = TEXT,
            /// `None`: queue mode.
            group: Option<&'a str> = TEXT,
            from_offset: Option<i64> = INT8,
            /// Timestamp text, cast by PostgreSQL (`22007` when it is not one).
            from_time: Option<String> = TEXT::timestamptz,
            limit: i32 = INT4,
            tenant: Uuid = UUID,
        }
        /// One segment and the group's state on its partition.
        #[derive(Debug, Clone, PartialEq)]
        pub struct SegmentRow {
            partition_name: String = TEXT,
            base_offset: i64 = INT8,
            message_count: i32 = INT4,
            blob: Bytes = BYTEA,
            /// The first offset the browse wants in this partition.
            from_offset: i64 = INT8,
            /// With `FROM 'timestamp'`: frames created before it are dropped.
            from_time: Option<SystemTime> = TIMESTAMPTZ,
            /// -1 when the group has no cursor on the partition.
            cursor_offset: i64 = INT8,
            /// The batch of a live lease, and which offsets of it are acked
            /// (a shared group: no batch, and the offsets above the start
            /// that are finished).
            lease_from: Option<i64> = INT8,
            lease_to: Option<i64> = INT8,
            lease_acked: Option<Vec<i64>> = INT8_ARRAY,
            /// Offsets the group dead-lettered.
            dead_lettered: Option<Vec<i64>> = INT8_ARRAY,
            /// A shared group's offsets under a live lease; `None` for an
            /// ordered group.
            leased: Option<Vec<i64>> = INT8_ARRAY,
        }
    }

    pub const BROWSE_MESSAGE = "qw_browse_message_v2" {
        SELECT * FROM queen.log_browse_message_v2;
        pub struct BrowseMessage<'a> {
            queue: &'a str = TEXT,
            /// The millisecond timestamp of the message id (UUIDv7).
            around: SystemTime = TIMESTAMPTZ,
            group: Option<&'a str> = TEXT,
            tenant: Uuid = UUID,
        }
        row SegmentRow {
            partition_name: TEXT,
            base_offset: INT8,
            message_count: INT4,
            blob: BYTEA,
            from_offset: INT8,
            from_time: TIMESTAMPTZ,
            cursor_offset: INT8,
            lease_from: INT8,
            lease_to: INT8,
            lease_acked: INT8_ARRAY,
            dead_lettered: INT8_ARRAY,
            leased: INT8_ARRAY,
        }
    }

    pub const TRACE = "qw_trace_messages_v2" {
        SELECT * FROM queen.trace_messages_v2;
        pub struct Trace<'a> {
            trace_id: &'a str = TEXT,
            limit: i32 = INT4,
            tenant: Uuid = UUID,
        }
        row TraceRow {
            queue: TEXT,
            message_id: UUID,
            message_offset: INT8,
            consumer_group: TEXT,
            partition_name: TEXT,
            base_offset: INT8,
            message_count: INT4,
            blob: BYTEA,
            from_offset: INT8,
            from_time: TIMESTAMPTZ,
            cursor_offset: INT8,
            lease_from: INT8,
            lease_to: INT8,
            lease_acked: INT8_ARRAY,
            dead_lettered: INT8_ARRAY,
            leased: INT8_ARRAY,
        }
    }

    pub const REPLAY_TAKE = "qw_dlq_replay_take_v1" {
        SELECT * FROM queen.dlq_replay_take_v1;
        pub struct ReplayTake<'a> {
            queue: &'a str = TEXT,
            partition: Option<&'a str> = TEXT,
            group: Option<&'a str> = TEXT,
            reason_like: Option<&'a str> = TEXT,
            limit: i32 = INT4,
            tenant: Uuid = UUID,
        }
        /// A dead-lettered message taken out of the DLQ, with the segment holding it.
        #[derive(Debug, Clone, PartialEq)]
        pub struct TakenRow {
            partition_name: String = TEXT,
            message_offset: i64 = INT8,
            consumer_group: String = TEXT,
            reason: Option<String> = TEXT,
            base_offset: i64 = INT8,
            blob: Bytes = BYTEA,
        }
    }
}

impl SegmentRow {
    /// The state of the message at `offset` for the row's group.
    pub fn state(&self, offset: i64) -> &'static str {
        let has = |list: &Option<Vec<i64>>| list.as_ref().is_some_and(|l| l.contains(&offset));
        if has(&self.dead_lettered) {
            return "dead_lettered";
        }
        if offset <= self.cursor_offset {
            return "consumed";
        }
        if let Some(leased) = &self.leased {
            // A shared group: each message on its own.
            return if leased.contains(&offset) {
                "leased"
            } else if has(&self.lease_acked) {
                "consumed"
            } else {
                "pending"
            };
        }
        match (self.lease_from, self.lease_to) {
            (Some(from), Some(to)) if (from..=to).contains(&offset) => {
                if has(&self.lease_acked) {
                    "consumed"
                } else {
                    "leased"
                }
            }
            _ => "pending",
        }
    }
}

/// One traced message for one group of its queue (`consumer_group` NULL:
/// the queue has none), with its segment and that group's state.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceRow {
    pub queue: String,
    pub message_id: Uuid,
    pub message_offset: i64,
    pub consumer_group: Option<String>,
    pub segment: SegmentRow,
}

impl FromRow for TraceRow {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        Ok(TraceRow {
            queue: row.get("queue")?,
            message_id: row.get("message_id")?,
            message_offset: row.get("message_offset")?,
            consumer_group: row.get("consumer_group")?,
            segment: SegmentRow::from_row(row)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row() -> SegmentRow {
        SegmentRow {
            partition_name: "p".into(),
            base_offset: 0,
            message_count: 10,
            blob: Bytes::new(),
            from_offset: 0,
            from_time: None,
            cursor_offset: 2,
            lease_from: Some(3),
            lease_to: Some(5),
            lease_acked: Some(vec![4]),
            dead_lettered: Some(vec![1]),
            leased: None,
        }
    }

    #[test]
    fn a_shared_group_s_message_is_leased_finished_or_pending_on_its_own() {
        let r = SegmentRow {
            lease_from: None,
            lease_to: None,
            lease_acked: Some(vec![5]),
            leased: Some(vec![3, 6]),
            ..row()
        };
        let states: Vec<&str> = (0..8).map(|o| r.state(o)).collect();
        assert_eq!(
            states,
            [
                "consumed",
                "dead_lettered",
                "consumed",
                "leased",
                "pending",
                "consumed",
                "leased",
                "pending"
            ]
        );
    }

    #[test]
    fn a_message_is_consumed_leased_pending_or_dead_lettered_for_its_group() {
        let r = row();
        let states: Vec<&str> = (0..7).map(|o| r.state(o)).collect();
        assert_eq!(
            states,
            [
                "consumed",
                "dead_lettered",
                "consumed",
                "leased",
                "consumed",
                "leased",
                "pending"
            ]
        );
    }
}
