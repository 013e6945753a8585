//! Writing prepared PUSH statements: each round is one call, in which all
//! the round's rows of one (queue, partition) become one segment, except a
//! statement's rows framed ahead ([`PreparedPush::pre_encode`]), which are
//! a segment of their own.
//!
//! Statements of one queue are written by `log_push_v1`; the fused
//! statements of several queues of a tenant by `log_push_many_v1`, which
//! writes each queue's segments by `log_push_v1` in one transaction (and
//! bounds its lock waits, see `engine/fusion/push.rs`).

use super::super::frame;
use super::super::sealing::{KeyRing, Sealing};
use super::super::values::{now_micros, system_time};
use super::super::ExecError;
use super::placed::Placed;
use super::{PreparedPush, PushResult};
use crate::backend::call::Calls;
use crate::backend::BackendError;
use crate::calls::push_many::{PushIds, PushMany};
use crate::calls::queues::{Push as PushCall, PushRow, PUSH};
use crate::calls::DecodeError;
use crate::protocol::{SqlError, SqlState};
use std::collections::HashMap;
use uuid::Uuid;

/// Writes PUSH statements of one queue with as few `log_push_v1` calls as
/// possible. Rows PostgreSQL reports as duplicates of committed messages
/// are dropped and the rest written again (the call that found them wrote
/// nothing); each round removes at least one row, so this ends. A
/// transaction id repeated across fused statements counts as a duplicate
/// of its first appearance, exactly as if the statements had run one after
/// the other.
///
/// A queue with `encryption_enabled` gets sealed segments: `sealing`
/// guesses which queues need it, and a wrong guess costs one round that
/// writes nothing of that queue (`log_push_v1` answers `encrypt` or
/// `plain`).
pub async fn write_pushes(
    conn: &mut Calls<'_>,
    batch: &mut [&mut PreparedPush],
    tenant: Uuid,
    sealing: &Sealing,
) -> Result<(), ExecError> {
    write(conn, batch, tenant, sealing, None).await
}

/// [`write_pushes`] for statements of any queues of `tenant`, by
/// `log_push_many_v1`: one call a round, the queues' segments in name
/// order. A queue's duplicates or wrong encryption guess cost that queue
/// another round; the other queues' rows of the round are written. A round
/// of one queue into partitions `placed` knows goes by `log_push_ids_v1`.
pub async fn write_fused(
    conn: &mut Calls<'_>,
    batch: &mut [&mut PreparedPush],
    tenant: Uuid,
    sealing: &Sealing,
    placed: &Placed,
) -> Result<(), ExecError> {
    write(conn, batch, tenant, sealing, Some(placed)).await
}

/// One segment of a call: rows of one (queue, partition), as (statement,
/// partition group, item), and their blob when framed ahead.
struct Segment {
    queue: usize,
    name: String,
    members: Vec<(usize, usize, usize)>,
    blob: Option<Vec<u8>>,
}

async fn write(
    conn: &mut Calls<'_>,
    batch: &mut [&mut PreparedPush],
    tenant: Uuid,
    sealing: &Sealing,
    // Fused (several queues, by log_push_many_v1 or log_push_ids_v1): the
    // partition ids learned.
    fused: Option<&Placed>,
) -> Result<(), ExecError> {
    let many = fused.is_some();
    // The statements' queues in name (byte) order, and each statement's.
    let mut queues: Vec<String> = batch.iter().map(|p| p.queue.clone()).collect();
    queues.sort_unstable();
    queues.dedup();
    if queues.len() > 1 && !many {
        return Err(SqlError::error(
            SqlState::INTERNAL_ERROR,
            "log_push_v1 writes statements of one queue only",
        )
        .into());
    }
    let queue_of: Vec<usize> = batch
        .iter()
        .map(|p| queues.partition_point(|q| *q < p.queue))
        .collect();
    let now = system_time(now_micros());
    let keys = sealing.keys();
    // Per queue, flips of the guess: more than two means ALTER QUEUE
    // toggles encryption faster than this push can follow.
    let mut flips = vec![0u8; queues.len()];
    // (statement, input index) of a row whose result another row copies.
    let mut copies: Vec<((usize, usize), (usize, usize))> = Vec::new();
    loop {
        let encrypted: Vec<bool> = queues
            .iter()
            .map(|q| sealing.is_encrypted(tenant, q))
            .collect();
        let mut segments: Vec<Segment> = Vec::new();
        let mut framed: Vec<(usize, usize)> = Vec::new();
        for (s, prep) in batch.iter_mut().enumerate() {
            let ring = encrypted[queue_of[s]].then_some(&keys);
            for g in 0..prep.partitions.len() {
                if let Some(blob) = prep.take_encoded(g, ring) {
                    framed.push((s, g));
                    let len = prep.partitions[g].1.len();
                    segments.push(Segment {
                        queue: queue_of[s],
                        name: prep.partitions[g].0.clone(),
                        members: (0..len).map(|k| (s, g, k)).collect(),
                        blob: Some(blob),
                    });
                }
            }
        }
        let mut shared: HashMap<(usize, &str), usize> = HashMap::new();
        let mut first_txn: HashMap<(usize, &str, i64, &str), (usize, usize)> = HashMap::new();
        copies.clear();
        for (s, prep) in batch.iter().enumerate() {
            let q = queue_of[s];
            for (g, (name, items)) in prep.partitions.iter().enumerate() {
                if framed.contains(&(s, g)) {
                    continue;
                }
                for (k, it) in items.iter().enumerate() {
                    if it.duplicate_of.is_some() || prep.results[it.input_index].is_some() {
                        continue;
                    }
                    if let (Some(h), Some(t)) = (it.hash, &it.frame.transaction_id) {
                        let key = (q, name.as_str(), h, t.as_str());
                        if let Some(&first) = first_txn.get(&key) {
                            copies.push(((s, it.input_index), first));
                            continue;
                        }
                        first_txn.insert(key, (s, it.input_index));
                    }
                    let at = *shared.entry((q, name)).or_insert_with(|| {
                        segments.push(Segment {
                            queue: q,
                            name: name.clone(),
                            members: Vec::new(),
                            blob: None,
                        });
                        segments.len() - 1
                    });
                    segments[at].members.push((s, g, k));
                }
            }
        }
        if segments.is_empty() {
            break;
        }
        // A queue's segments are consecutive in the call.
        segments.sort_by_key(|seg| seg.queue);
        let mut seals: Vec<Option<Option<&KeyRing>>> = vec![None; queues.len()];
        let mut names = Vec::with_capacity(segments.len());
        let mut seg_queues = Vec::with_capacity(segments.len());
        let mut counts = Vec::with_capacity(segments.len());
        let mut blobs = Vec::with_capacity(segments.len());
        let mut hashes: Vec<Option<i64>> = Vec::new();
        let mut traces: Vec<Option<&str>> = Vec::new();
        let mut ids = Vec::new();
        let mut times = Vec::with_capacity(segments.len());
        // Flattened position → (statement, input index).
        let mut flat: Vec<(usize, usize)> = Vec::new();
        for seg in segments {
            let seal = match seals[seg.queue] {
                Some(seal) => seal,
                None => {
                    let seal = encrypted[seg.queue]
                        .then(|| sealing_key(&keys, &queues[seg.queue]))
                        .transpose()?;
                    seals[seg.queue] = Some(seal);
                    seal
                }
            };
            let mut frames = Vec::new();
            for &(s, g, k) in &seg.members {
                let it = &batch[s].partitions[g].1[k];
                if seg.blob.is_none() {
                    frames.push(&it.frame);
                }
                hashes.push(it.hash);
                traces.push(it.frame.trace_id.as_deref());
                ids.push(it.frame.message_id);
                flat.push((s, it.input_index));
            }
            let blob = match seg.blob {
                Some(blob) => blob,
                None => frame::encode(frames.iter().copied(), seal).map_err(|e| {
                    let state = match e {
                        frame::SegmentFrameError::TooLong(_) => SqlState::PROGRAM_LIMIT_EXCEEDED,
                        _ => SqlState::INTERNAL_ERROR,
                    };
                    SqlError::error(state, e.to_string())
                })?,
            };
            names.push(seg.name);
            seg_queues.push(queues[seg.queue].as_str());
            counts.push(seg.members.len() as i32);
            blobs.push(blob);
            times.push(now);
        }
        // No transaction id anywhere: NULL, so the procedure skips its
        // dedup probe altogether.
        let hashes = hashes.iter().any(Option::is_some).then_some(hashes);
        // Likewise no trace id: NULL, and log_traces is not touched.
        let traces = traces.iter().any(Option::is_some).then_some(traces);
        let push = PushCall {
            queue: &queues[0],
            partitions: names,
            counts: &counts,
            blobs,
            txn_hashes: hashes,
            message_ids: &ids,
            min_created_at: &times,
            max_created_at: &times,
            trace_ids: traces,
            tenant,
        };
        let rows = match fused {
            Some(placed) => run_fused(conn, push, seg_queues, placed, tenant).await?,
            None => conn.run(&push).await?,
        };
        let outcome = read_round(rows, &counts, &flat, &ids, &queue_of)?;
        for &(q, encrypted) in &outcome.reframe {
            // Nothing of that queue was written: frame its rows the other
            // way next round.
            sealing.learn(tenant, &queues[q], encrypted);
            flips[q] += 1;
            if flips[q] > 2 {
                return Err(SqlError::error(
                    SqlState::T_R_SERIALIZATION_FAILURE,
                    format!(
                        "queue \"{}\" changed its encryption while being pushed to; retry",
                        queues[q]
                    ),
                )
                .into());
            }
        }
        for ((s, i), result) in outcome.results {
            // A queue with duplicates wrote nothing: only they are final.
            if !outcome.duplicates[queue_of[s]] || result.status == "duplicate" {
                batch[s].results[i] = Some(result);
            }
        }
        if outcome.reframe.is_empty() && !outcome.duplicates.contains(&true) {
            break;
        }
    }
    for ((s, i), (fs, fi)) in copies {
        let original = batch[fs].results[fi];
        batch[s].results[i] = Some(PushResult {
            status: "duplicate",
            offset: original.map_or(-1, |r| r.offset),
            message_id: original.map_or_else(Uuid::nil, |r| r.message_id),
            partition_id: None,
        });
    }
    Ok(())
}

/// One round of fused statements: by partition ids when it is one queue's
/// (no trace id) and `placed` knows every partition's id, else, or when
/// those ids went stale, by `log_push_many_v1`, whose answer teaches
/// `placed` the ids.
async fn run_fused<'a>(
    conn: &mut Calls<'_>,
    mut push: PushCall<'a>,
    queues: Vec<&'a str>,
    placed: &Placed,
    tenant: Uuid,
) -> Result<Vec<PushRow>, ExecError> {
    let one = queues.first().filter(|q| queues.iter().all(|o| o == *q));
    if let (Some(&queue), None) = (one, &push.trace_ids) {
        let names = push.partitions.iter().map(String::as_str);
        if let Some(partition_ids) = placed.ids(tenant, queue, names) {
            let call = PushIds {
                partition_ids,
                push,
            };
            let rows = conn.run(&call).await?;
            if !rows.iter().any(|r| r.status == "stale") {
                return Ok(rows);
            }
            placed.stale(tenant, queue);
            push = call.push;
        }
    }
    let call = PushMany { queues, push };
    let rows = conn.run(&call).await?;
    // A queued row stands for its segment: the segment whose first message
    // it names.
    let mut first = 0;
    let starts: Vec<i32> = call
        .push
        .counts
        .iter()
        .map(|n| {
            let at = first;
            first += n;
            at
        })
        .collect();
    let learned = rows.iter().filter_map(|row| {
        let seg = starts.binary_search(&row.msg_index).ok()?;
        let id = row.partition_id.filter(|_| row.status == "queued")?;
        Some((call.queues[seg], call.push.partitions[seg].as_str(), id))
    });
    placed.learn(tenant, learned);
    Ok(rows)
}

/// What one call answered.
struct Round {
    /// (statement, input index) and its result.
    results: Vec<((usize, usize), PushResult)>,
    /// Per queue: the call found duplicates in it (and wrote none of it).
    duplicates: Vec<bool>,
    /// Queues the call wrote nothing of, framed the wrong way, and whether
    /// they are encrypted.
    reframe: Vec<(usize, bool)>,
}

fn read_round(
    rows: Vec<PushRow>,
    counts: &[i32],
    flat: &[(usize, usize)],
    ids: &[Uuid],
    queue_of: &[usize],
) -> Result<Round, ExecError> {
    // A queued row stands for its segment (the calls' p_per_segment).
    let mut span_at = vec![0usize; flat.len()];
    let mut start = 0;
    for &n in counts {
        span_at[start] = n as usize;
        start += n as usize;
    }
    let queues = queue_of.iter().max().map_or(0, |q| q + 1);
    let mut round = Round {
        results: Vec::with_capacity(flat.len()),
        duplicates: vec![false; queues],
        reframe: Vec::new(),
    };
    for row in rows {
        let msg_index = row.msg_index;
        let unknown = || {
            ExecError::from(BackendError::from(DecodeError::Value {
                call: PUSH.name,
                column: "msg_index",
                reason: format!("unknown index {msg_index}"),
            }))
        };
        let Some(first) = usize::try_from(msg_index).ok().filter(|&i| i < flat.len()) else {
            return Err(unknown());
        };
        let queue = queue_of[flat[first].0];
        let (status, len) = match row.status {
            "queued" if span_at[first] > 0 => ("queued", span_at[first]),
            "queued" => return Err(unknown()),
            "duplicate" => {
                round.duplicates[queue] = true;
                ("duplicate", 1)
            }
            "encrypt" | "plain" => {
                round.reframe.push((queue, row.status == "encrypt"));
                continue;
            }
            _ => continue,
        };
        for k in 0..len {
            round.results.push((
                flat[first + k],
                PushResult {
                    status,
                    offset: row.offset.map_or(-1, |o| o + k as i64),
                    message_id: if status == "queued" {
                        ids[first + k]
                    } else {
                        row.message_id.unwrap_or_else(Uuid::nil)
                    },
                    partition_id: row.partition_id,
                },
            ));
        }
    }
    Ok(round)
}

/// The ring to seal a push to an encrypted queue with; without a key the
/// push is refused, so nothing is stored in plaintext.
fn sealing_key<'k>(keys: &'k KeyRing, queue: &str) -> Result<&'k KeyRing, SqlError> {
    match keys.current() {
        Some(_) => Ok(keys),
        None => Err(SqlError::error(
            SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!(
                "queue \"{queue}\" has encryption_enabled, but this queenwire has no encryption key (--encryption-key-file); nothing was stored"
            ),
        )),
    }
}
