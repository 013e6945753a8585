//! POP's call: the plan of a POP statement (what does not change between
//! the attempts of a WAIT), one call of `log_pop_v2` over the whole queue or
//! among candidate partition ids, and the decoding of what it claimed into
//! the dialect's rows (receipts signed here). Which candidates to pass is
//! the hot list's business (`hotlist/`); waiting is `wait.rs`.

use super::frame::{self, SegmentFrameError};
use super::receipt::ReceiptKey;
use super::sealing::KeyRing;
use super::values::{Cell, Params};
use super::ExecError;
use crate::backend::call::Calls;
use crate::calls::queues::{PopArgs, PopCandidates, PopRow, Unclaim, UnclaimShared};
use crate::protocol::SqlError;
use crate::protocol::SqlState;
use crate::rewrite::build::pop::pop_args;
use crate::rewrite::dialect::pop::Pop;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use uuid::Uuid;

/// The parts of a POP that do not change between attempts of a WAIT.
#[derive(Clone)]
pub struct PopPlan {
    pub queue: String,
    pub wait: Option<Duration>,
    args: PopArgs,
    /// The keys that open encrypted segments, as they were at the start.
    keys: Arc<KeyRing>,
    /// The POPs of this many sessions, one partition each (fusion); 1 for
    /// a POP of its own.
    sessions: usize,
    /// One queue of a wildcard POP: a queue dropped since the namespace was
    /// listed is not made again.
    of_namespace: bool,
}

pub fn plan_pop(stmt: &Pop, params: &Params<'_>, keys: Arc<KeyRing>) -> Result<PopPlan, SqlError> {
    let args = pop_args(stmt, params)?;
    Ok(PopPlan {
        queue: args.queue.clone(),
        wait: args.wait,
        args,
        keys,
        sessions: 1,
        of_namespace: false,
    })
}

impl PopPlan {
    /// The consumer group (queue mode's when the POP names none).
    pub fn group(&self) -> &str {
        &self.args.group
    }

    /// The POP names its partition (`PARTITION p`).
    pub fn named_partition(&self) -> bool {
        self.args.partition.is_some()
    }

    /// Its PARTITIONS.
    pub fn max_partitions(&self) -> usize {
        usize::try_from(self.args.max_partitions).unwrap_or(1)
    }

    /// Its LIMIT.
    pub fn limit(&self) -> usize {
        usize::try_from(self.args.limit).unwrap_or(1)
    }

    /// The call values of the POP.
    pub fn args(&self) -> &PopArgs {
        &self.args
    }

    /// The sessions whose POPs this plan claims for, one partition each.
    pub fn sessions(&self) -> usize {
        self.sessions
    }

    /// This POP (LIMIT n, one partition; or a fused plan of it) for `k`
    /// sessions at once: up to
    /// `k` partitions, at most n messages of each, so that each session
    /// gets what its own POP would have claimed.
    pub fn for_sessions(&self, k: usize) -> PopPlan {
        let k = k.max(1);
        let mut args = self.args.clone();
        let each = usize::try_from(self.args.limit).unwrap_or(1) / self.sessions.max(1);
        args.limit = i32::try_from(each.saturating_mul(k)).unwrap_or(i32::MAX);
        args.max_partitions = i32::try_from(k).unwrap_or(i32::MAX);
        PopPlan {
            queue: self.queue.clone(),
            wait: self.wait,
            args,
            keys: self.keys.clone(),
            sessions: k,
            of_namespace: self.of_namespace,
        }
    }

    /// The per-partition cap of a fused plan's call.
    fn partition_limit(&self) -> Option<i32> {
        (self.sessions > 1).then(|| self.args.limit / i32::try_from(self.sessions).unwrap_or(1))
    }

    /// The same POP on one queue of a wildcard POP's namespace, with what
    /// is left of its LIMIT and PARTITIONS (each at least 1).
    pub fn for_queue(&self, queue: &str, limit: usize, partitions: usize) -> PopPlan {
        let mut args = self.args.clone();
        args.queue = queue.to_string();
        args.limit = i32::try_from(limit.max(1)).unwrap_or(i32::MAX);
        args.max_partitions = i32::try_from(partitions.max(1)).unwrap_or(i32::MAX);
        PopPlan {
            queue: args.queue.clone(),
            wait: self.wait,
            args,
            keys: self.keys.clone(),
            sessions: 1,
            of_namespace: true,
        }
    }
}

/// What POP calls claimed: the dialect's rows, partition after partition
/// in claim order, and how many rows each partition gave.
#[derive(Default)]
pub struct Claimed {
    pub rows: Vec<Vec<Cell>>,
    pub per_partition: Vec<usize>,
}

impl Claimed {
    /// The partitions claimed.
    pub fn partitions(&self) -> usize {
        self.per_partition.len()
    }

    pub fn extend(&mut self, other: Claimed) {
        self.rows.extend(other.rows);
        self.per_partition.extend(other.per_partition);
    }

    /// The rows of each of `sessions` sessions, a partition each in claim
    /// order; those left over get none.
    pub fn split(self, sessions: usize) -> Vec<Vec<Vec<Cell>>> {
        let mut rows = self.rows.into_iter();
        let mut out: Vec<Vec<Vec<Cell>>> = self
            .per_partition
            .into_iter()
            .take(sessions)
            .map(|n| rows.by_ref().take(n).collect())
            .collect();
        out.resize_with(sessions, Vec::new);
        out
    }
}

/// What `log_pop_v2` said of each partition it judged: (id, state,
/// retry_at), claimed ones included (their lease's expiry as retry_at), in
/// its order.
pub type Judged = Vec<(i64, String, Option<SystemTime>)>;

/// One call of `log_pop_v2`: claims among `candidates` (partition ids), or
/// over the whole queue (or the partition the POP names) without them, and
/// decodes what it claimed.
pub async fn pop_call(
    conn: &mut Calls<'_>,
    plan: &PopPlan,
    key: &ReceiptKey,
    tenant: Uuid,
    candidates: Option<&[i64]>,
) -> Result<(Claimed, Judged), ExecError> {
    let rows = conn
        .run(&PopCandidates {
            args: &plan.args,
            tenant,
            candidates,
            partition_limit: plan.partition_limit(),
            create: !plan.of_namespace,
        })
        .await?;
    let mut out = Claimed::default();
    let mut judged = Vec::with_capacity(rows.len());
    let mut claimed = Vec::new();
    // The claim the last entry of `out.per_partition` counts: a partition
    // and its lease. A shared group's partition may be claimed once for
    // each session of a fused POP, under one token: each of those claims
    // starts with a row `shared` (its further rows are `shared+`).
    let mut counted = None;
    let mut failure = None;
    for judgement in rows {
        let at = match &judgement.claimed {
            Some(row) => row.lease_expires_at,
            None => judgement.retry_at,
        };
        let starts = judgement.state == "shared";
        judged.push((judgement.partition_id, judgement.state, at));
        if let Some(row) = judgement.claimed {
            if failure.is_none() {
                let before = out.rows.len();
                failure = decode_claimed(&row, plan, key, &mut out.rows).err();
                let added = out.rows.len() - before;
                // A partition's segments come one after the other.
                let claim = (row.partition_id, row.lease_token);
                match out.per_partition.last_mut() {
                    Some(n) if counted == Some(claim) && !starts => *n += added,
                    _ if added > 0 => {
                        out.per_partition.push(added);
                        counted = Some(claim);
                    }
                    _ => {}
                }
            }
            claimed.push(row);
        }
    }
    match failure {
        None => Ok((out, judged)),
        Some(e) => Err(give_back(conn, plan, tenant, &claimed, e).await),
    }
}

/// A claim that cannot be handed out (a sealed segment whose key is
/// missing, or that does not authenticate) is given back before the POP
/// fails, so its messages stay, uncounted, for a queenwire that holds the
/// key; a corrupt plain segment is not (it would come back every time).
async fn give_back(
    conn: &mut Calls<'_>,
    plan: &PopPlan,
    tenant: Uuid,
    claimed: &[PopRow],
    error: SegmentFrameError,
) -> ExecError {
    let state = match &error {
        SegmentFrameError::Sealed(crate::engine::sealing::SealError::UnknownKey(_)) => {
            SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE
        }
        _ => SqlState::DATA_CORRUPTED,
    };
    let refusal = SqlError::error(
        state,
        format!(
            "queue \"{}\": {error}; the message stays in the queue",
            plan.queue
        ),
    );
    if !matches!(error, SegmentFrameError::Sealed(_)) {
        return refusal.into();
    }
    let shared: Vec<&PopRow> = claimed.iter().filter(|r| r.shared).collect();
    if !shared.is_empty() {
        let call = UnclaimShared {
            partition_ids: shared.iter().map(|r| r.partition_id).collect(),
            group: &plan.args.group,
            lease_tokens: shared.iter().filter_map(|r| r.lease_token).collect(),
            from_offsets: shared.iter().map(|r| r.from_offset).collect(),
            to_offsets: shared.iter().map(|r| r.to_offset).collect(),
            tenant,
        };
        if let Err(e) = conn.run(&call).await {
            return e.into();
        }
        if shared.len() == claimed.len() {
            return refusal.into();
        }
    }
    let claimed: Vec<&PopRow> = claimed.iter().filter(|r| !r.shared).collect();
    let call = Unclaim {
        partition_ids: claimed.iter().map(|r| r.partition_id).collect(),
        group: &plan.args.group,
        lease_tokens: claimed.iter().map(|r| r.lease_token).collect(),
        from_offsets: claimed.iter().map(|r| r.from_offset).collect(),
        to_offsets: claimed.iter().map(|r| r.to_offset).collect(),
        tenant,
    };
    match conn.run(&call).await {
        Ok(_) => refusal.into(),
        Err(e) => e.into(),
    }
}

fn decode_claimed(
    row: &PopRow,
    plan: &PopPlan,
    key: &ReceiptKey,
    out: &mut Vec<Vec<Cell>>,
) -> Result<(), SegmentFrameError> {
    let first = row.from_offset.max(row.base_offset);
    let to = row.to_offset;
    if to < first {
        return Ok(());
    }
    let frames = frame::decode_range(
        &row.blob,
        (first - row.base_offset) as usize,
        (to - first + 1) as usize,
        &plan.keys,
    )?;
    // The queue's and the partition's names once for the claim's rows,
    // shared by them rather than copied into each.
    let queue: Arc<str> = Arc::from(plan.queue.as_str());
    let partition: Arc<str> = Arc::from(row.partition_name.as_str());
    for (i, f) in frames.into_iter().enumerate() {
        let offset = first + i as i64;
        // A shared claim has a token with AUTO ACK too; nothing to ACK.
        let receipt = row
            .lease_token
            .filter(|_| !plan.args.auto_ack)
            .map(|token| {
                key.encode_parts(
                    row.partition_id,
                    offset,
                    token,
                    &plan.args.group,
                    row.shared,
                )
            });
        out.push(vec![
            Cell::opt_text(receipt),
            Cell::Uuid(f.message_id),
            Cell::Shared(queue.clone()),
            Cell::Shared(partition.clone()),
            Cell::Int8(offset),
            Cell::Jsonb(f.payload),
            Cell::opt_text(f.transaction_id),
            Cell::opt_text(f.trace_id),
            Cell::Int4(row.retry_count),
            Cell::unix_micros(f.created_at_micros),
            Cell::timestamp(row.lease_expires_at),
        ]);
    }
    Ok(())
}
