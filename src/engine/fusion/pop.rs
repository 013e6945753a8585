//! POP fusion: per (tenant, queue, group and the POP's options), the POPs
//! of one partition each (LIMIT n, no PARTITION, no PARTITIONS) waiting
//! while a POP of theirs is in flight become one `log_pop_v2` call through
//! the hot list, one commit: up to k partitions for k sessions, at most n
//! messages of each, and each session gets one partition's messages — what
//! its own POP would have claimed. Per (partition, group) one lease at a
//! time still holds: a partition's messages all go to one session. POPs of
//! 16 messages or more have two such lanes, each session always in the
//! same one (`SPLIT_FROM`), so two of their writes may be in flight.
//!
//! A session's plain ACK that follows its fused POP comes to the same lane
//! (`ack.rs`): a write acknowledges the ACKs waiting, then claims for the
//! POPs waiting, and one commit ends both (a consumer popping and acking
//! in a loop otherwise waits for two lanes, each write carrying a few
//! statements and a commit of its own).

use super::{fail_all, outcome, unavailable, Batch, Fuser};
use crate::backend::call::{CallEnd, Calls};
use crate::backend::pool;
use crate::backend::BackendConn;
use crate::engine::acks::ack_receipts;
use crate::engine::pop::PopPlan;
use crate::engine::receipt::ReceiptKey;
use crate::engine::values::Cell;
use crate::engine::ExecError;
use std::sync::Arc;
use tokio::sync::oneshot;
use uuid::Uuid;

/// A statement of a POP lane.
pub(super) enum Job {
    Pop(super::Job<PopPlan, Vec<Vec<Cell>>>),
    /// A plain ACK of a session whose last POP this lane wrote, and that
    /// session (a claim is held for its next POP: `hold.rs`).
    Ack(super::AckJob, Option<tokio::task::Id>),
}

/// What POPs must share to be claimed by one call.
#[derive(Hash, PartialEq, Eq, Clone)]
pub(super) struct Key {
    pub(super) tenant: Uuid,
    queue: String,
    group: String,
    limit: i32,
    lease_ms: Option<i64>,
    auto_ack: bool,
    subscribe: &'static str,
    subscribe_at: Option<String>,
    /// Which of the key's lanes: POPs of many messages split their
    /// sessions over two (`SPLIT_FROM`).
    shard: u8,
}

/// POPs of at least this many messages go to one of two lanes by session,
/// so two of their writes may be in flight: such a write is milliseconds
/// of PostgreSQL's CPU (a hundred-receipt ACK, a hundred-message claim),
/// and with one in flight a core waited while the other worked (popack100
/// at C=8: 85,321-94,301 msg/s with one lane, 116,791-125,656 with two,
/// the same CPU a message; four lanes were no better). POPs of fewer
/// messages keep one lane: their writes are mostly fixed cost and commit,
/// which two lanes would pay twice for half the batch (alternating runs,
/// popack1 at 1,000 partitions: 4,356-4,435 msg/s with one lane, 3,836-
/// 3,867 with two for every POP; on one shared partition 4,612-4,811
/// against 2,441-2,578).
const SPLIT_FROM: i32 = 16;

/// How long a POP lane's write waits for the sessions it answered (the
/// push and ACK lanes wait 500 µs, `lane.rs`). A consumer's turnaround
/// between two writes of its lane is its POP's rows or its ACK's answer,
/// then its next statement, on cores PostgreSQL keeps busy. Measured
/// 2026-12-04, popack1 at 1,000 partitions, C=8, alternating 7 s slices:
/// 1.5 ms read higher rates than 500 µs in 5 of 6 pairs (+7 % to +39 %)
/// and less PostgreSQL CPU a message (170-273 µs against 179-338: more
/// statements a commit); popack100 and autoack1 unchanged within the VM's
/// swings.
pub(super) const LINGER: std::time::Duration = std::time::Duration::from_micros(1500);

impl Key {
    /// Whether POPs of this key may have claims held for them (`hold.rs`):
    /// leased ones (never AUTO ACK's, whose cursor moves at the claim)
    /// whose lease is long beside the hold (a POP's `LEASE` of at least
    /// 2 s; the queue's `lease_time` is never below a second).
    pub(super) fn holds(&self) -> bool {
        !self.auto_ack && self.lease_ms.is_none_or(|ms| ms >= 2_000)
    }

    pub(super) fn group(&self) -> &str {
        &self.group
    }

    pub(super) fn queue(&self) -> &str {
        &self.queue
    }

    fn of(plan: &PopPlan, tenant: Uuid) -> Key {
        let a = plan.args();
        Key {
            tenant,
            queue: a.queue.clone(),
            group: a.group.clone(),
            limit: a.limit,
            lease_ms: a.lease_ms,
            auto_ack: a.auto_ack,
            subscribe: a.subscribe,
            subscribe_at: a.subscribe_at.clone(),
            shard: if a.limit >= SPLIT_FROM {
                session_shard()
            } else {
                0
            },
        }
    }
}

/// The calling session's lane of two, fixed for the session (its task).
fn session_shard() -> u8 {
    use std::hash::{Hash, Hasher};
    tokio::task::try_id().map_or(0, |id| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        id.hash(&mut h);
        (h.finish() % 2) as u8
    })
}

/// A POP lane and what its writer needs besides its statements.
pub(super) struct Via {
    pub(super) key: Key,
    receipts: ReceiptKey,
    digest: String,
    /// The lane's POP, for the claims of a write with ACKs and no POP.
    plan: PopPlan,
}

/// A POP the fuser can take: one partition, chosen by the hot list. A
/// `SUBSCRIBE FROM` timestamp is read in its session's settings (its
/// TimeZone), which the fuser's connection does not have.
pub fn fusable(plan: &PopPlan) -> bool {
    !plan.named_partition()
        && plan.max_partitions() == 1
        && plan.sessions() == 1
        && plan.args().subscribe_at.is_none()
}

impl Fuser {
    /// One attempt of a POP ([`fusable`]) outside any transaction block:
    /// its rows, once committed. `digest`: the queue key's wake-up digest.
    pub async fn pop(
        self: &Arc<Self>,
        plan: &PopPlan,
        receipts: &ReceiptKey,
        tenant: Uuid,
        digest: &str,
    ) -> Result<Vec<Vec<Cell>>, ExecError> {
        // Remembered for the session's ACK, whether the lane writes this
        // POP or a claim held for the session answers it.
        let via = self.popped_via(Key::of(plan, tenant), |key| Via {
            key,
            receipts: receipts.clone(),
            digest: digest.to_string(),
            plan: plan.clone(),
        });
        if let Some(rows) = self.take_held(&via.key).await {
            return Ok(rows);
        }
        let (reply, rx) = oneshot::channel();
        let job = Job::Pop(super::Job {
            statement: plan.clone(),
            reply,
        });
        self.enqueue_pop_lane(via, job);
        outcome(rx).await
    }

    /// Queues `job` in the lane of `via`, and leads its writes when none
    /// is in flight.
    pub(super) fn enqueue_pop_lane(self: &Arc<Self>, via: Arc<Via>, job: Job) {
        if let Some(lane) = self.pops.enqueue(via.key.clone(), job) {
            // A task of its own: a client that disconnects mid-call must
            // not abandon the statements fused with its own.
            let fuser = self.clone();
            tokio::spawn(async move {
                while let Some(jobs) = lane.next().await {
                    fuser.claim_pops(jobs, &via).await;
                }
            });
        }
    }

    async fn claim_pops(self: &Arc<Self>, jobs: Vec<Job>, via: &Via) {
        let (receipts, tenant, digest) = (&via.receipts, via.key.tenant, via.digest.as_str());
        // A session that went away before its POP was sent gets nothing
        // claimed for it; an ACK is written whatever became of its session.
        let mut pops = Vec::with_capacity(jobs.len());
        let mut acks = Vec::new();
        // The acking sessions a claim may be held for (`hold.rs`), one
        // entry an ACK.
        let mut may_hold = Vec::new();
        let hold = via.key.holds();
        for job in jobs {
            match job {
                Job::Pop(j) if j.reply.is_closed() => {}
                Job::Pop(j) => pops.push((j.statement, j.reply)),
                Job::Ack(j, session) => {
                    may_hold.push(session.filter(|_| hold && !j.reply.is_closed()));
                    acks.push(j);
                }
            }
        }
        let (plans, replies): (Vec<PopPlan>, Vec<_>) = pops.into_iter().unzip();
        if plans.is_empty() && may_hold.iter().all(Option::is_none) {
            if !acks.is_empty() {
                self.write_acks(Batch::of(acks), tenant).await;
            }
            return;
        }
        let mut conn = match pool::checkout(&self.pool).await {
            Ok(c) => c,
            Err(e) => {
                Batch::of(acks).unavailable(&e);
                return unavailable(replies, &e);
            }
        };
        // The ACKs first, in the transaction that the POPs' first call
        // commits: what they released is claimable by the next write.
        let mut acked = None;
        if !acks.is_empty() {
            let batch = Batch::of(acks);
            let calls = &mut Calls::new(&mut conn, CallEnd::Flush);
            match ack_receipts(calls, &batch.receipts, false, None, tenant).await {
                Ok(status) => acked = Some((batch, status)),
                Err(ExecError::Lost(e)) => {
                    batch.fail(e.outcome_unknown(), &e.cause().to_string());
                    fail_all(replies, false, &e.cause().to_string());
                    return pool::release(conn);
                }
                // Rolled back; the Sync ends the failed transaction, then
                // each ACK alone, so the failing one fails by itself.
                Err(_) => match conn.sync().await {
                    Ok(_) => self.ack_each(&mut conn, batch, tenant).await,
                    Err(e) => {
                        conn.do_not_reuse();
                        batch.fail(false, &e.to_string());
                        fail_all(replies, false, &e.to_string());
                        return pool::release(conn);
                    }
                },
            }
        }
        // A claim is held only for a session whose ACK acked every receipt:
        // one answered `stale` (its lease gone: expired, or its group or
        // queue reset or dropped since) claims nothing, and so recreates
        // nothing a POP would create.
        let mut holders = Vec::new();
        if let Some((batch, status)) = &acked {
            let mut statuses = status.iter();
            for (n, session) in batch.sizes.iter().zip(&may_hold) {
                let all_acked = statuses.by_ref().take(*n).all(|s| s == "acked");
                if let Some(session) = session.filter(|s| all_acked && !holders.contains(s)) {
                    holders.push(session);
                }
            }
        }
        let plan = match plans.first().or(holders.first().map(|_| &via.plan)) {
            Some(first) => first.for_sessions(plans.len() + holders.len()),
            None => {
                // Nothing to claim: the ACKs' transaction commits alone.
                self.commit_acks(&mut conn, acked).await;
                return pool::release(conn);
            }
        };
        let hot = &self.announcer.waiters.hot;
        let began = std::time::Instant::now();
        let together = hot
            .pop(
                &mut Calls::new(&mut conn, CallEnd::Sync),
                &plan,
                receipts,
                tenant,
                digest,
                false,
            )
            .await;
        // The ACKs' transaction is still open when the POPs made no call
        // (the ring knew nothing claimable): it commits now, before the
        // ACKs are answered.
        let together = match together {
            Ok(claimed) if conn.awaiting_reply() => match conn.sync().await {
                Ok(_) => Ok(claimed),
                Err(e) => Err(ExecError::from(e)),
            },
            other => other,
        };
        match together {
            Ok(claimed) if conn.status() == crate::protocol::TxStatus::Idle => {
                // The waiting POPs first, then a claim for each acking
                // session, held before its ACK is answered.
                let sessions = replies.len();
                let mut split = claimed.split(sessions + holders.len());
                let rest = split.split_off(sessions.min(split.len()));
                let mut held = Vec::new();
                let at = std::time::Instant::now();
                for (session, rows) in holders.into_iter().zip(rest) {
                    if !rows.is_empty() {
                        self.hold(session, &via.key, receipts, rows, at, began);
                        held.push(session);
                    }
                }
                if !held.is_empty() {
                    self.give_back_later(held, at);
                }
                if let Some((batch, status)) = acked {
                    self.released(&batch.receipts);
                    batch.answer(status);
                }
                for (rows, reply) in split.into_iter().zip(replies) {
                    let _ = reply.send(Ok(rows));
                }
            }
            Ok(_) => {
                conn.do_not_reuse();
                if let Some((batch, _)) = acked {
                    batch.fail(false, "the pop transaction did not commit");
                }
                fail_all(replies, false, "the pop transaction did not commit");
            }
            Err(e @ (ExecError::Refused(_) | ExecError::Failed(_))) => {
                // Rolled back (the ACKs with the first call, or committed
                // by it: acked again alone, they say so either way).
                if let Some((batch, _)) = acked {
                    self.ack_each(&mut conn, batch, tenant).await;
                }
                if replies.len() == 1 {
                    // A lone POP's error is its own.
                    if let Some(reply) = replies.into_iter().next() {
                        let _ = reply.send(Err(e));
                    }
                } else {
                    // Each POP alone, so a failing one fails by itself.
                    for (plan, reply) in plans.into_iter().zip(replies) {
                        let calls = &mut Calls::new(&mut conn, CallEnd::Sync);
                        let result = hot.pop(calls, &plan, receipts, tenant, digest, false).await;
                        let _ = reply.send(result.map(|c| c.rows));
                    }
                }
            }
            // The connection broke: every statement of the write shares
            // its outcome (a lease taken then expires and its messages
            // come back; an AUTO ACK may have moved its cursor).
            Err(ExecError::Lost(e)) => {
                let why = e.cause().to_string();
                if let Some((batch, _)) = acked {
                    batch.fail(e.outcome_unknown(), &why);
                }
                fail_all(replies, e.outcome_unknown(), &why)
            }
        }
        pool::release(conn);
    }

    /// Commits the ACKs written with Flush (nothing else joined their
    /// transaction), then answers them.
    async fn commit_acks(&self, conn: &mut BackendConn, acked: Option<(Batch, Vec<String>)>) {
        let Some((batch, status)) = acked else {
            return;
        };
        match conn.sync().await {
            Ok(crate::protocol::TxStatus::Idle) => {
                self.released(&batch.receipts);
                batch.answer(status);
            }
            Ok(_) => {
                conn.do_not_reuse();
                batch.fail(false, "the ack transaction did not commit");
            }
            Err(e) => {
                conn.do_not_reuse();
                batch.fail(e.outcome_unknown(), &e.to_string());
            }
        }
    }
}
