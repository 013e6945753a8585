//! The queue statements: PUSH, DROP QUEUE and the SHOW statements (POP is
//! `pop.rs`, ACK and RENEW `acks.rs`), each one call (`crate::calls`) of a
//! `queen.*` procedure on
//! the session's backend connection (so it joins the surrounding
//! transaction). What needs the engine's state is done here: framing and
//! compression of PUSH's segments, receipts signed and checked.

use super::frame::{self, Frame};
use super::sealing::{KeyRing, Sealing};
use super::values::{now_micros, Cell, Params};
use super::ExecError;
use crate::backend::call::Calls;
use crate::calls::admin::DeleteQueue;
use crate::calls::show::{ShowDlq, ShowGroups, ShowPartitions, ShowQueues};
use crate::protocol::SqlError;
use crate::protocol::SqlState;
use crate::rewrite::dialect::push::Push;
use std::collections::HashMap;
use std::sync::Arc;
use uuid::Uuid;

pub use crate::calls::queues::{DEFAULT_PARTITION, QUEUE_MODE_GROUP};
pub use placed::Placed;
pub use write::{write_fused, write_pushes};

mod placed;
mod write;

/// Limits applied before any SQL runs.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest payload, in bytes (default 1 MiB).
    pub max_payload: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_payload: 1024 * 1024,
        }
    }
}

/// A 64-bit FNV-1a hash of a transaction id: stored in `queen.log_txns`, so
/// it must never change between versions (std's hashers may).
pub fn txn_hash(txn: &str) -> i64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in txn.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x100000001b3);
    }
    h as i64
}

struct PushItem {
    input_index: usize,
    frame: Frame,
    /// Input index of an earlier row of this statement with the same
    /// partition and transaction id.
    duplicate_of: Option<usize>,
    hash: Option<i64>,
}

#[derive(Clone, Copy)]
struct PushResult {
    status: &'static str,
    offset: i64,
    message_id: Uuid,
    /// The partition written (queued rows of this call; not duplicates).
    partition_id: Option<i64>,
}

/// A partition's rows of one statement framed and compressed before the
/// write ([`PreparedPush::pre_encode`]).
struct Encoded {
    blob: Vec<u8>,
    /// The ring it was sealed with (None: plain).
    ring: Option<Arc<KeyRing>>,
}

/// Fewest rows of one partition in one statement that are framed before
/// the write, as a segment of their own: below it, fused statements'
/// rows for a partition share one segment (a segment row per message
/// would cost PostgreSQL a row each and POP a decode each).
const PRE_ENCODE_MIN: usize = 16;

/// A PUSH statement checked and framed, ready to be written alone or fused
/// with other statements for the same queue.
pub struct PreparedPush {
    pub queue: String,
    /// Partitions in order of first appearance, each with its rows.
    partitions: Vec<(String, Vec<PushItem>)>,
    /// Per entry of `partitions`: its segment, when framed ahead.
    encoded: Vec<Option<Encoded>>,
    row_partition: Vec<String>,
    row_txn: Vec<Option<String>>,
    results: Vec<Option<PushResult>>,
}

/// Checks a PUSH's values and builds its frames; no I/O.
pub fn prepare_push(
    stmt: &Push,
    params: &Params<'_>,
    limits: &Limits,
) -> Result<PreparedPush, SqlError> {
    let queue = params.name(&stmt.queue, "queue")?;
    let now = now_micros();
    let mut partitions: Vec<(String, Vec<PushItem>)> = Vec::new();
    let mut index_of: HashMap<String, usize> = HashMap::new();
    let mut seen_txn: HashMap<(usize, String), usize> = HashMap::new();
    let mut row_partition = Vec::with_capacity(stmt.rows.len());
    let mut row_txn = Vec::with_capacity(stmt.rows.len());
    for (i, row) in stmt.rows.iter().enumerate() {
        let payload = params.json(&row.payload, "payload", limits.max_payload)?;
        let partition = match &row.partition {
            Some(p) => params.name(p, "partition")?,
            None => DEFAULT_PARTITION.to_string(),
        };
        let transaction_id = match &row.transaction_id {
            Some(v) => params.opt_text(v)?,
            None => None,
        };
        let trace_id = match &row.trace_id {
            Some(v) => params.opt_text(v)?,
            None => None,
        };
        for (what, v) in [("transaction_id", &transaction_id), ("trace_id", &trace_id)] {
            // Text, as PostgreSQL's text: no NUL (a trace id is stored in a
            // text column; a transaction id only in the message's frame).
            if v.as_ref().is_some_and(|s| s.contains('\0')) {
                return Err(SqlError::error(
                    SqlState::CHARACTER_NOT_IN_REPERTOIRE,
                    format!("{what}: invalid byte sequence for encoding \"UTF8\": 0x00"),
                ));
            }
            if v.as_ref().is_some_and(|s| s.len() > 255) {
                return Err(SqlError::error(
                    SqlState::PROGRAM_LIMIT_EXCEEDED,
                    format!("{what} longer than 255 bytes"),
                ));
            }
        }
        let p = *index_of.entry(partition.clone()).or_insert_with(|| {
            partitions.push((partition.clone(), Vec::new()));
            partitions.len() - 1
        });
        let duplicate_of = transaction_id
            .as_ref()
            .and_then(|t| seen_txn.get(&(p, t.clone())).copied());
        if let (Some(t), None) = (&transaction_id, duplicate_of) {
            seen_txn.insert((p, t.clone()), i);
        }
        row_partition.push(partition);
        row_txn.push(transaction_id.clone());
        partitions[p].1.push(PushItem {
            input_index: i,
            hash: transaction_id.as_deref().map(txn_hash),
            frame: Frame {
                message_id: Uuid::now_v7(),
                created_at_micros: now,
                transaction_id,
                trace_id,
                payload,
            },
            duplicate_of,
        });
    }
    Ok(PreparedPush {
        queue,
        encoded: Vec::new(),
        partitions,
        row_partition,
        row_txn,
        results: vec![None; stmt.rows.len()],
    })
}

impl PreparedPush {
    /// Messages that are not a statement (fired timers): (partition,
    /// payload JSON text) in order.
    pub fn from_messages(queue: String, messages: Vec<(String, String)>) -> PreparedPush {
        let now = now_micros();
        let mut partitions: Vec<(String, Vec<PushItem>)> = Vec::new();
        let mut row_partition = Vec::with_capacity(messages.len());
        for (i, (partition, payload)) in messages.into_iter().enumerate() {
            let item = PushItem {
                input_index: i,
                frame: Frame {
                    message_id: Uuid::now_v7(),
                    created_at_micros: now,
                    transaction_id: None,
                    trace_id: None,
                    payload,
                },
                duplicate_of: None,
                hash: None,
            };
            match partitions.iter_mut().find(|(n, _)| *n == partition) {
                Some((_, items)) => items.push(item),
                None => partitions.push((partition.clone(), vec![item])),
            }
            row_partition.push(partition);
        }
        let n = row_partition.len();
        PreparedPush {
            queue,
            encoded: Vec::new(),
            partitions,
            row_partition,
            row_txn: vec![None; n],
            results: vec![None; n],
        }
    }

    /// Frames and compresses, in the calling task, each partition's rows
    /// that will be a segment of their own (at least [`PRE_ENCODE_MIN`],
    /// none with a transaction id: those may be dropped as duplicates
    /// between rounds), so that a fused write, one at a time per queue,
    /// does not spend its turn on them. Sealed as `sealing` guesses the
    /// queue needs; a wrong guess, a key reload or a failure leaves the
    /// work to the write, which frames from the rows as before.
    pub fn pre_encode(&mut self, tenant: Uuid, sealing: &Sealing) {
        let ring = sealing
            .is_encrypted(tenant, &self.queue)
            .then(|| sealing.keys());
        if ring.as_ref().is_some_and(|r| r.current().is_none()) {
            return;
        }
        self.encoded = self
            .partitions
            .iter()
            .map(|(_, items)| {
                if items.len() < PRE_ENCODE_MIN
                    || items
                        .iter()
                        .any(|it| it.hash.is_some() || it.duplicate_of.is_some())
                {
                    return None;
                }
                let blob = frame::encode(items.iter().map(|it| &it.frame), ring.as_deref()).ok()?;
                Some(Encoded {
                    blob,
                    ring: ring.clone(),
                })
            })
            .collect();
    }

    /// Takes partition `g`'s segment framed ahead, when it was sealed with
    /// `ring` (or plain when None). Taken by the first round of a write
    /// whatever it holds, so a later round (a corrected guess, duplicates
    /// found elsewhere, a statement written again alone) frames its rows.
    fn take_encoded(&mut self, g: usize, ring: Option<&Arc<KeyRing>>) -> Option<Vec<u8>> {
        let taken = self.encoded.get_mut(g)?.take()?;
        let fits = match (taken.ring.as_ref(), ring) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        };
        fits.then_some(taken.blob)
    }

    /// Appends the ids of the partitions this statement's committed write
    /// queued messages into (for the hot list; duplicates wrote nothing),
    /// consecutive repeats once; the caller sorts and dedups.
    pub fn written_partitions(&self, into: &mut Vec<i64>) {
        for r in self.results.iter().flatten() {
            if let Some(id) = r.partition_id {
                if into.last() != Some(&id) {
                    into.push(id);
                }
            }
        }
    }

    /// Forgets the outcome of a write that was rolled back.
    pub fn reset(&mut self) {
        self.results.iter_mut().for_each(|r| *r = None);
    }

    /// The statement's rows, in input order.
    pub fn rows(mut self) -> Vec<Vec<Cell>> {
        for (_, items) in &self.partitions {
            for it in items {
                if let Some(first) = it.duplicate_of {
                    let original = self.results[first];
                    self.results[it.input_index] = Some(PushResult {
                        status: "duplicate",
                        offset: original.map_or(-1, |r| r.offset),
                        message_id: original.map_or_else(Uuid::nil, |r| r.message_id),
                        partition_id: None,
                    });
                }
            }
        }
        let mut out = Vec::with_capacity(self.results.len());
        let queue: Arc<str> = Arc::from(std::mem::take(&mut self.queue));
        let queued: Arc<str> = Arc::from("queued");
        let duplicate: Arc<str> = Arc::from("duplicate");
        for (i, r) in self.results.iter().enumerate() {
            let r = r.unwrap_or(PushResult {
                status: "queued",
                offset: -1,
                message_id: Uuid::nil(),
                partition_id: None,
            });
            out.push(vec![
                Cell::Uuid(r.message_id),
                Cell::Shared(queue.clone()),
                Cell::Text(std::mem::take(&mut self.row_partition[i])),
                Cell::Int8(r.offset),
                Cell::opt_text(self.row_txn[i].take()),
                Cell::Shared(match r.status {
                    "queued" => queued.clone(),
                    "duplicate" => duplicate.clone(),
                    other => Arc::from(other),
                }),
            ]);
        }
        out
    }
}

/// PUSH on the session's own connection (inside its transaction); the
/// statement's rows are then [`PreparedPush::rows`].
pub async fn push(
    conn: &mut Calls<'_>,
    stmt: &Push,
    params: &Params<'_>,
    limits: &Limits,
    tenant: Uuid,
    sealing: &Sealing,
) -> Result<PreparedPush, ExecError> {
    let mut prep = prepare_push(stmt, params, limits)?;
    write_pushes(conn, &mut [&mut prep], tenant, sealing).await?;
    Ok(prep)
}

/// Returns whether the queue existed.
pub async fn drop_queue(
    conn: &mut Calls<'_>,
    queue: &str,
    tenant: Uuid,
) -> Result<bool, ExecError> {
    let rows = conn.run(&DeleteQueue { queue, tenant }).await?;
    Ok(rows.first().and_then(|r| r.existed).unwrap_or(false))
}

pub async fn show_queues(conn: &mut Calls<'_>, tenant: Uuid) -> Result<Vec<Vec<Cell>>, ExecError> {
    let rows = conn.run(&ShowQueues { tenant }).await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            vec![
                Cell::opt_text(r.queue),
                int8(r.partitions),
                int8(r.messages),
                int8(r.pending),
                int8(r.dead_lettered),
                Cell::timestamp(r.created_at),
            ]
        })
        .collect())
}

fn int8(v: Option<i64>) -> Cell {
    v.map_or(Cell::Null, Cell::Int8)
}

pub async fn show_partitions(
    conn: &mut Calls<'_>,
    queue: &str,
    tenant: Uuid,
) -> Result<Vec<Vec<Cell>>, ExecError> {
    let rows = conn.run(&ShowPartitions { queue, tenant }).await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            vec![
                Cell::opt_text(r.partition_name),
                int8(r.messages),
                int8(r.last_offset),
                Cell::timestamp(r.last_write_at),
            ]
        })
        .collect())
}

pub async fn show_groups(
    conn: &mut Calls<'_>,
    queue: Option<&str>,
    tenant: Uuid,
) -> Result<Vec<Vec<Cell>>, ExecError> {
    let rows = conn.run(&ShowGroups { queue, tenant }).await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            vec![
                Cell::opt_text(r.queue),
                Cell::opt_text(r.consumer_group),
                int8(r.partitions),
                int8(r.lag),
                Cell::timestamp(r.oldest_pending_at),
                int8(r.leased_partitions),
                int8(r.time_lag_seconds),
                Cell::timestamp(r.last_claimed_at),
                Cell::opt_text(r.state),
                Cell::opt_text(r.group_type),
            ]
        })
        .collect())
}

pub async fn show_dlq(
    conn: &mut Calls<'_>,
    queue: &str,
    limit: i32,
    tenant: Uuid,
    keys: &KeyRing,
) -> Result<Vec<Vec<Cell>>, ExecError> {
    let rows = conn
        .run(&ShowDlq {
            queue,
            limit,
            tenant,
        })
        .await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let frame = r.base_offset.and_then(|base| {
            let skip = usize::try_from(r.message_offset - base).ok()?;
            frame::decode_range(&r.blob, skip, 1, keys).ok()?.pop()
        });
        out.push(vec![
            frame
                .as_ref()
                .map_or(Cell::Null, |f| Cell::Uuid(f.message_id)),
            Cell::Text(r.partition_name),
            Cell::Int8(r.message_offset),
            Cell::Text(r.consumer_group),
            Cell::opt_text(r.reason),
            Cell::Int4(r.retry_count),
            Cell::timestamp(r.failed_at),
            frame.map_or(Cell::Null, |f| Cell::Jsonb(f.payload)),
        ]);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn txn_hash_is_stable() {
        // Stored in the database: these values must never change.
        assert_eq!(txn_hash(""), 0xcbf29ce484222325u64 as i64);
        assert_eq!(txn_hash("a"), 0xaf63dc4c8601ec8cu64 as i64);
    }
}
