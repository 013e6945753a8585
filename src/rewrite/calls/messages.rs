//! The messages surface (`sql/procedures/016_messages.sql`): browsing
//! without leasing (`log_browse_v1`, `log_browse_message_v1`), which return
//! whole segments with the group's consumer state beside them (the engine
//! decodes the frames and decides each message's state), and the first half
//! of REPLAY DLQ (`dlq_replay_take_v1`; the second is an ordinary push).

use super::{column, Call, CallSpec, DecodeError, FromRow, ResultColumn, Row};
use bytes::Bytes;
use std::time::SystemTime;
use tokio_postgres::types::{ToSql, Type};
use uuid::Uuid;

const SEGMENT_COLUMNS: &[ResultColumn] = &[
    column("partition_name", Type::TEXT),
    column("base_offset", Type::INT8),
    column("message_count", Type::INT4),
    column("blob", Type::BYTEA),
    column("from_offset", Type::INT8),
    column("from_time", Type::TIMESTAMPTZ),
    column("cursor_offset", Type::INT8),
    column("lease_from", Type::INT8),
    column("lease_to", Type::INT8),
    column("lease_acked", Type::INT8_ARRAY),
    column("dead_lettered", Type::INT8_ARRAY),
];

pub const BROWSE: CallSpec = CallSpec {
    name: "qw_browse_v1",
    sql: "SELECT partition_name, base_offset, message_count, blob, from_offset, from_time, cursor_offset, lease_from, lease_to, lease_acked, dead_lettered FROM queen.log_browse_v1(p_queue => $1, p_partition => $2, p_group => $3, p_from_offset => $4, p_from_time => $5::timestamptz, p_limit => $6, p_tenant => $7)",
    params: &[
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::INT8,
        Type::TEXT,
        Type::INT4,
        Type::UUID,
    ],
    columns: SEGMENT_COLUMNS,
};

pub struct Browse<'a> {
    pub queue: &'a str,
    pub partition: Option<&'a str>,
    /// `None`: queue mode.
    pub group: Option<&'a str>,
    pub from_offset: Option<i64>,
    /// Timestamp text, cast by PostgreSQL (`22007` when it is not one).
    pub from_time: Option<String>,
    pub limit: i32,
    pub tenant: Uuid,
}

impl Call for Browse<'_> {
    const SPEC: &'static CallSpec = &BROWSE;
    type Row = SegmentRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![
            &self.queue,
            &self.partition,
            &self.group,
            &self.from_offset,
            &self.from_time,
            &self.limit,
            &self.tenant,
        ]
    }
}

pub const BROWSE_MESSAGE: CallSpec = CallSpec {
    name: "qw_browse_message_v1",
    sql: "SELECT partition_name, base_offset, message_count, blob, from_offset, from_time, cursor_offset, lease_from, lease_to, lease_acked, dead_lettered FROM queen.log_browse_message_v1(p_queue => $1, p_around => $2, p_group => $3, p_tenant => $4)",
    params: &[Type::TEXT, Type::TIMESTAMPTZ, Type::TEXT, Type::UUID],
    columns: SEGMENT_COLUMNS,
};

pub struct BrowseMessage<'a> {
    pub queue: &'a str,
    /// The millisecond timestamp of the message id (UUIDv7).
    pub around: SystemTime,
    pub group: Option<&'a str>,
    pub tenant: Uuid,
}

impl Call for BrowseMessage<'_> {
    const SPEC: &'static CallSpec = &BROWSE_MESSAGE;
    type Row = SegmentRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![&self.queue, &self.around, &self.group, &self.tenant]
    }
}

/// One segment and the group's state on its partition.
#[derive(Debug, Clone, PartialEq)]
pub struct SegmentRow {
    pub partition_name: String,
    pub base_offset: i64,
    pub message_count: i32,
    pub blob: Bytes,
    /// The first offset the browse wants in this partition.
    pub from_offset: i64,
    /// With `FROM 'timestamp'`: frames created before it are dropped.
    pub from_time: Option<SystemTime>,
    /// -1 when the group has no cursor on the partition.
    pub cursor_offset: i64,
    /// The batch of a live lease, and which offsets of it are acked.
    pub lease_from: Option<i64>,
    pub lease_to: Option<i64>,
    pub lease_acked: Option<Vec<i64>>,
    /// Offsets the group dead-lettered.
    pub dead_lettered: Option<Vec<i64>>,
}

impl FromRow for SegmentRow {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        Ok(SegmentRow {
            partition_name: row.get("partition_name")?,
            base_offset: row.get("base_offset")?,
            message_count: row.get("message_count")?,
            blob: row.bytes("blob")?,
            from_offset: row.get("from_offset")?,
            from_time: row.get("from_time")?,
            cursor_offset: row.get("cursor_offset")?,
            lease_from: row.get("lease_from")?,
            lease_to: row.get("lease_to")?,
            lease_acked: row.get("lease_acked")?,
            dead_lettered: row.get("dead_lettered")?,
        })
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

pub const TRACE: CallSpec = CallSpec {
    name: "qw_trace_messages_v1",
    sql: "SELECT queue, message_id, message_offset, consumer_group, partition_name, base_offset, message_count, blob, from_offset, from_time, cursor_offset, lease_from, lease_to, lease_acked, dead_lettered FROM queen.trace_messages_v1(p_trace_id => $1, p_limit => $2, p_tenant => $3)",
    params: &[Type::TEXT, Type::INT4, Type::UUID],
    columns: &[
        column("queue", Type::TEXT),
        column("message_id", Type::UUID),
        column("message_offset", Type::INT8),
        column("consumer_group", Type::TEXT),
        column("partition_name", Type::TEXT),
        column("base_offset", Type::INT8),
        column("message_count", Type::INT4),
        column("blob", Type::BYTEA),
        column("from_offset", Type::INT8),
        column("from_time", Type::TIMESTAMPTZ),
        column("cursor_offset", Type::INT8),
        column("lease_from", Type::INT8),
        column("lease_to", Type::INT8),
        column("lease_acked", Type::INT8_ARRAY),
        column("dead_lettered", Type::INT8_ARRAY),
    ],
};

pub struct Trace<'a> {
    pub trace_id: &'a str,
    pub limit: i32,
    pub tenant: Uuid,
}

impl Call for Trace<'_> {
    const SPEC: &'static CallSpec = &TRACE;
    type Row = TraceRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![&self.trace_id, &self.limit, &self.tenant]
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

pub const REPLAY_TAKE: CallSpec = CallSpec {
    name: "qw_dlq_replay_take_v1",
    sql: "SELECT partition_name, message_offset, consumer_group, reason, base_offset, blob FROM queen.dlq_replay_take_v1(p_queue => $1, p_partition => $2, p_group => $3, p_reason_like => $4, p_limit => $5, p_tenant => $6)",
    params: &[
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::INT4,
        Type::UUID,
    ],
    columns: &[
        column("partition_name", Type::TEXT),
        column("message_offset", Type::INT8),
        column("consumer_group", Type::TEXT),
        column("reason", Type::TEXT),
        column("base_offset", Type::INT8),
        column("blob", Type::BYTEA),
    ],
};

pub struct ReplayTake<'a> {
    pub queue: &'a str,
    pub partition: Option<&'a str>,
    pub group: Option<&'a str>,
    pub reason_like: Option<&'a str>,
    pub limit: i32,
    pub tenant: Uuid,
}

impl Call for ReplayTake<'_> {
    const SPEC: &'static CallSpec = &REPLAY_TAKE;
    type Row = TakenRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![
            &self.queue,
            &self.partition,
            &self.group,
            &self.reason_like,
            &self.limit,
            &self.tenant,
        ]
    }
}

/// A dead-lettered message taken out of the DLQ, with the segment holding it.
#[derive(Debug, Clone, PartialEq)]
pub struct TakenRow {
    pub partition_name: String,
    pub message_offset: i64,
    pub consumer_group: String,
    pub reason: Option<String>,
    pub base_offset: i64,
    pub blob: Bytes,
}

impl FromRow for TakenRow {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        Ok(TakenRow {
            partition_name: row.get("partition_name")?,
            message_offset: row.get("message_offset")?,
            consumer_group: row.get("consumer_group")?,
            reason: row.get("reason")?,
            base_offset: row.get("base_offset")?,
            blob: row.bytes("blob")?,
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
        }
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
