//! PUSH, POP: `log_push_v1`, `log_pop_v2` (and its whole-queue form
//! `log_pop_v1`), `log_unclaim_v1`, and the hot list's seed
//! `log_hotlist_seed_v1`; ACK and RENEW are in `acks.rs`. The engine adds
//! what needs its state: the frames and their compression (PUSH), the
//! receipts' HMAC (POP), the hot list's candidates (POP).

use super::declare::calls;
use super::{Call, CallSpec, DecodeError, FromRow, Row};
use bytes::Bytes;
use std::time::{Duration, SystemTime};
use tokio_postgres::types::ToSql;
use uuid::Uuid;

/// The partition of a row that names none.
pub const DEFAULT_PARTITION: &str = "Default";
/// The consumer group of a POP that names none (queue mode).
pub const QUEUE_MODE_GROUP: &str = "__QUEUE_MODE__";

calls! {
    pub const PUSH = "qw_push_v1" {
        SELECT * FROM queen.log_push_v1(.., p_per_segment => true);
        /// One write: a segment per partition, the arrays parallel by partition
        /// except the message ids and transaction hashes, which run over every
        /// message of every segment in order.
        pub struct Push<'a> {
            queue: &'a str = TEXT,
            partitions: Vec<String> = TEXT_ARRAY,
            counts: &'a [i32] = INT4_ARRAY,
            blobs: Vec<Vec<u8>> = BYTEA_ARRAY,
            /// `None` when no message has a transaction id: the procedure then
            /// skips its dedup probe altogether.
            txn_hashes: Option<Vec<Option<i64>>> = INT8_ARRAY,
            message_ids: &'a [Uuid] = UUID_ARRAY,
            min_created_at: &'a [SystemTime] = TIMESTAMPTZ_ARRAY,
            max_created_at: &'a [SystemTime] = TIMESTAMPTZ_ARRAY,
            /// `None` when no message has a trace id: nothing is written to
            /// `queen.log_traces` (017_traces).
            trace_ids: Option<Vec<Option<&'a str>>> = TEXT_ARRAY,
            tenant: Uuid = UUID,
        }
        row PushRow { msg_index: INT4, status: TEXT, offset: INT8, message_id: UUID, partition_id: INT8 }
    }

    pub const POP = "qw_pop_v1" {
        SELECT * FROM queen.log_pop_v1;
        args(
            queue: TEXT,
            partition: TEXT,
            group: TEXT,
            limit: INT4,
            max_partitions: INT4,
            lease_ms: INT8,
            subscribe: TEXT,
            subscribe_at: TEXT::timestamptz,
            auto_ack: BOOL,
            tenant: UUID,
        );
        row PopRow {
            partition_id: INT8,
            partition_name: TEXT,
            lease_token: UUID,
            lease_expires_at: TIMESTAMPTZ,
            retry_count: INT4,
            from_offset: INT8,
            to_offset: INT8,
            base_offset: INT8,
            blob: BYTEA,
        }
    }

    /// POP among candidate partition ids (the hot list) or, without them, over
    /// the whole queue: [`POP`]'s values plus `p_candidates`, and rows that
    /// also report each candidate judged (`state`, `retry_at`).
    pub const POP_CANDIDATES = "qw_pop_v2" {
        SELECT * FROM queen.log_pop_v2;
        args(
            queue: TEXT,
            partition: TEXT,
            group: TEXT,
            limit: INT4,
            max_partitions: INT4,
            lease_ms: INT8,
            subscribe: TEXT,
            subscribe_at: TEXT::timestamptz,
            auto_ack: BOOL,
            tenant: UUID,
            candidates: INT8_ARRAY,
            partition_limit: INT4,
            create: BOOL,
        );
        row PopJudged {
            partition_id: INT8,
            partition_name: TEXT,
            state: TEXT,
            retry_at: TIMESTAMPTZ,
            lease_token: UUID,
            lease_expires_at: TIMESTAMPTZ,
            retry_count: INT4,
            from_offset: INT8,
            to_offset: INT8,
            base_offset: INT8,
            blob: BYTEA,
        }
    }

    pub const HOTLIST_SEED = "qw_hotlist_seed_v1" {
        SELECT * FROM queen.log_hotlist_seed_v1;
        /// The hot list's seed of one (queue, group): the whole queue's pending
        /// partitions (`written_since` `None`) or those written since then.
        pub struct HotlistSeed<'a> {
            queue: &'a str = TEXT,
            group: &'a str = TEXT,
            written_since: Option<SystemTime> = TIMESTAMPTZ,
            limit: i32 = INT4,
            tenant: Uuid = UUID,
        }
        #[derive(Debug, Clone, PartialEq)]
        pub struct HotlistSeedRow {
            partition_ids: Vec<i64> = INT8_ARRAY,
            seen_at: SystemTime = TIMESTAMPTZ,
            written_to: Option<SystemTime> = TIMESTAMPTZ,
            repair_at: Option<SystemTime> = TIMESTAMPTZ,
            repair_partition_id: Option<i64> = INT8,
            repair_whole: Option<bool> = BOOL,
        }
    }

    /// Gives back one POP's claims that could not be decoded (a segment
    /// sealed with a key this queenwire lacks): the messages stay.
    pub const UNCLAIM = "qw_unclaim_v1" {
        SELECT queen.log_unclaim_v1;
        pub struct Unclaim<'a> {
            partition_ids: Vec<i64> = INT8_ARRAY,
            group: &'a str = TEXT,
            lease_tokens: Vec<Option<Uuid>> = UUID_ARRAY,
            from_offsets: Vec<i64> = INT8_ARRAY,
            to_offsets: Vec<i64> = INT8_ARRAY,
            tenant: Uuid = UUID,
        }
        pub struct UnclaimRow {
            released: Option<i32> = INT4,
        }
    }

    /// Gives back a shared group's claims (`log_unclaim_shared_v1`): the
    /// messages each (partition, token) still leases are available again.
    pub const UNCLAIM_SHARED = "qw_unclaim_shared_v1" {
        SELECT queen.log_unclaim_shared_v1;
        pub struct UnclaimShared<'a> {
            partition_ids: Vec<i64> = INT8_ARRAY,
            group: &'a str = TEXT,
            lease_tokens: Vec<Uuid> = UUID_ARRAY,
            /// Each claim's lowest and highest offset (its messages lie between).
            from_offsets: Vec<i64> = INT8_ARRAY,
            to_offsets: Vec<i64> = INT8_ARRAY,
            tenant: Uuid = UUID,
        }
        row UnclaimRow { released: INT4 }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct PushRow {
    /// Index into the flattened messages of the call; of a `queued` row,
    /// its segment's first message (the call asks for a row per segment
    /// when everything was queued: its messages follow at offset + k).
    pub msg_index: i32,
    /// `queued`, `duplicate` or `retry`; or, alone, `encrypt` / `plain`
    /// (nothing written: the queue's encryption differs from the blobs'),
    /// or `stale` (`log_push_ids_v1`: nothing written, an id or the queue
    /// not as the call took them).
    /// A name of the procedure's, not copied per row.
    pub status: &'static str,
    pub offset: Option<i64>,
    pub message_id: Option<Uuid>,
    /// The partition's id, for a `queued` message.
    pub partition_id: Option<i64>,
}

impl FromRow for PushRow {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        Ok(PushRow {
            msg_index: row.get("msg_index")?,
            status: match row.get::<&str>("status")? {
                "queued" => "queued",
                "duplicate" => "duplicate",
                "retry" => "retry",
                "encrypt" => "encrypt",
                "plain" => "plain",
                "stale" => "stale",
                other => {
                    return Err(DecodeError::Value {
                        call: PUSH.name,
                        column: "status",
                        reason: format!("unknown status {other:?}"),
                    })
                }
            },
            offset: row.get("offset")?,
            message_id: row.get("message_id")?,
            partition_id: row.get("partition_id")?,
        })
    }
}

/// The values of a POP that do not change between attempts of a WAIT.
#[derive(Debug, Clone, PartialEq)]
pub struct PopArgs {
    pub queue: String,
    pub partition: Option<String>,
    pub group: String,
    pub limit: i32,
    pub max_partitions: i32,
    pub lease_ms: Option<i64>,
    pub subscribe: &'static str,
    /// Timestamp text, cast by PostgreSQL (so it reads it as it would).
    pub subscribe_at: Option<String>,
    pub auto_ack: bool,
    pub wait: Option<Duration>,
}

impl PopArgs {
    /// The arguments `log_pop_v1` and `log_pop_v2` share, in order; `log_pop_v2`
    /// takes `extra` more after them.
    fn params<'a>(&'a self, tenant: &'a Uuid, extra: usize) -> Vec<&'a (dyn ToSql + Sync)> {
        let mut params: Vec<&(dyn ToSql + Sync)> = Vec::with_capacity(10 + extra);
        params.extend([
            &self.queue as &(dyn ToSql + Sync),
            &self.partition,
            &self.group,
            &self.limit,
            &self.max_partitions,
            &self.lease_ms,
            &self.subscribe,
            &self.subscribe_at,
            &self.auto_ack,
            tenant,
        ]);
        params
    }
}

pub struct Pop<'a> {
    pub args: &'a PopArgs,
    pub tenant: Uuid,
}

impl Call for Pop<'_> {
    const SPEC: &'static CallSpec = &POP;
    type Row = PopRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        self.args.params(&self.tenant, 0)
    }
}

/// One claimed segment range of a partition.
#[derive(Debug, Clone, PartialEq)]
pub struct PopRow {
    pub partition_id: i64,
    pub partition_name: String,
    /// `None` with AUTO ACK (nothing to acknowledge).
    pub lease_token: Option<Uuid>,
    pub lease_expires_at: Option<SystemTime>,
    pub retry_count: i32,
    pub from_offset: i64,
    pub to_offset: i64,
    pub base_offset: i64,
    /// The segment (frames, see `engine/frame.rs`).
    pub blob: Bytes,
    /// Claimed for a shared group: each message is leased on its own, and
    /// the token is the claim's (also with AUTO ACK).
    pub shared: bool,
}

impl FromRow for PopRow {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        PopRow::decode(row, false)
    }
}

impl PopRow {
    /// `log_pop_v1`'s row, and the claimed rows of `log_pop_v2`'s.
    fn decode(row: &Row<'_>, shared: bool) -> Result<Self, DecodeError> {
        Ok(PopRow {
            partition_id: row.get("partition_id")?,
            partition_name: row.get("partition_name")?,
            lease_token: row.get("lease_token")?,
            lease_expires_at: row.get("lease_expires_at")?,
            retry_count: row.get("retry_count")?,
            from_offset: row.get("from_offset")?,
            to_offset: row.get("to_offset")?,
            base_offset: row.get("base_offset")?,
            blob: row.bytes("blob")?,
            shared,
        })
    }
}

pub struct PopCandidates<'a> {
    pub args: &'a PopArgs,
    pub tenant: Uuid,
    /// `None`: the whole queue (or the partition the POP names).
    pub candidates: Option<&'a [i64]>,
    /// At most this many messages of one partition (fused POPs: one
    /// partition per session); `None`: only the LIMIT bounds them.
    pub partition_limit: Option<i32>,
    /// Whether a named group's POP makes a missing queue (not a wildcard
    /// POP's: its queue was dropped since its namespace was listed).
    pub create: bool,
}

impl Call for PopCandidates<'_> {
    const SPEC: &'static CallSpec = &POP_CANDIDATES;
    type Row = PopJudged;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        let mut params = self.args.params(&self.tenant, 3);
        params.push(&self.candidates);
        params.push(&self.partition_limit);
        params.push(&self.create);
        params
    }
}

/// What `log_pop_v2` says of one partition: a claimed segment range
/// (`state` = `claimed`, [`PopJudged::claimed`]) or a candidate it judged.
#[derive(Debug, Clone, PartialEq)]
pub struct PopJudged {
    pub partition_id: i64,
    /// `claimed`, `shared` / `shared+` (the first / a further row of a
    /// shared group's claim), `drained`, `empty`, `leased`, `blocked`,
    /// `window`, `delayed`, `locked`.
    pub state: String,
    /// Pending but not before this (database clock), for the waiting states.
    pub retry_at: Option<SystemTime>,
    pub claimed: Option<PopRow>,
}

impl FromRow for PopJudged {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        let state: String = row.get("state")?;
        let partition_id = row.get("partition_id")?;
        // A shared group's claim: its first row `shared`, the others `shared+`.
        let shared = state == "shared" || state == "shared+";
        let claimed = if shared || state == "claimed" {
            Some(PopRow::decode(row, shared)?)
        } else {
            None
        };
        Ok(PopJudged {
            partition_id,
            state,
            retry_at: row.get("retry_at")?,
            claimed,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::acks::{AckRow, ACK};
    use super::super::RawRow;
    use super::*;

    #[test]
    fn rows_decode_by_name() {
        let raw = RawRow::from_cells(vec![
            Some(3i32.to_be_bytes().to_vec()),
            Some(b"queued".to_vec()),
            Some(41i64.to_be_bytes().to_vec()),
            None,
            Some(7i64.to_be_bytes().to_vec()),
        ]);
        let row: PushRow = Row::decode(&PUSH, &raw).unwrap();
        assert_eq!(
            row,
            PushRow {
                msg_index: 3,
                status: "queued",
                offset: Some(41),
                message_id: None,
                partition_id: Some(7),
            }
        );
        let ack = RawRow::from_cells(vec![None, Some(b"acked".to_vec())]);
        assert!(Row::decode::<AckRow>(&ACK, &ack).is_err());
        let odd = RawRow::from_cells(vec![
            Some(0i32.to_be_bytes().to_vec()),
            Some(b"queue".to_vec()),
            None,
            None,
            None,
        ]);
        assert!(Row::decode::<PushRow>(&PUSH, &odd).is_err());
    }
}
