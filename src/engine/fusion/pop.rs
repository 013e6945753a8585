//! POP fusion: per (tenant, queue, group and the POP's options), the POPs
//! of one partition each (LIMIT n, no PARTITION, no PARTITIONS) waiting
//! while a POP of theirs is in flight become one `log_pop_v2` call through
//! the hot list, one commit: up to k partitions for k sessions, at most n
//! messages of each, and each session gets one partition's messages — what
//! its own POP would have claimed. Per (partition, group) one lease at a
//! time still holds: a partition's messages all go to one session.

use super::{fail_all, outcome, unavailable, Fuser};
use crate::backend::call::{CallEnd, Calls};
use crate::backend::pool;
use crate::engine::pop::PopPlan;
use crate::engine::receipt::ReceiptKey;
use crate::engine::values::Cell;
use crate::engine::ExecError;
use std::sync::Arc;
use tokio::sync::oneshot;
use uuid::Uuid;

pub(super) type Job = super::Job<PopPlan, Vec<Vec<Cell>>>;

/// What POPs must share to be claimed by one call.
#[derive(Hash, PartialEq, Eq)]
pub(super) struct Key {
    tenant: Uuid,
    queue: String,
    group: String,
    limit: i32,
    lease_ms: Option<i64>,
    auto_ack: bool,
    subscribe: &'static str,
    subscribe_at: Option<String>,
}

impl Key {
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
        }
    }
}

/// A POP the fuser can take: one partition, chosen by the hot list.
pub fn fusable(plan: &PopPlan) -> bool {
    !plan.named_partition() && plan.max_partitions() == 1 && plan.sessions() == 1
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
        let (reply, rx) = oneshot::channel();
        let job = Job {
            statement: plan.clone(),
            reply,
        };
        if let Some(lane) = self.pops.enqueue(Key::of(plan, tenant), job) {
            // A task of its own: a client that disconnects mid-call must
            // not abandon the POPs fused with its own.
            let fuser = self.clone();
            let receipts = receipts.clone();
            let digest = digest.to_string();
            tokio::spawn(async move {
                while let Some(jobs) = lane.next().await {
                    fuser.claim_pops(jobs, &receipts, tenant, &digest).await;
                }
            });
        }
        outcome(rx).await
    }

    async fn claim_pops(&self, jobs: Vec<Job>, receipts: &ReceiptKey, tenant: Uuid, digest: &str) {
        // A session that went away before its POP was sent gets nothing
        // claimed for it.
        let (plans, replies): (Vec<PopPlan>, Vec<_>) = jobs
            .into_iter()
            .filter(|j| !j.reply.is_closed())
            .map(|j| (j.statement, j.reply))
            .unzip();
        let Some(first) = plans.first() else {
            return;
        };
        let plan = first.for_sessions(plans.len());
        let mut conn = match pool::checkout(&self.pool).await {
            Ok(c) => c,
            Err(e) => return unavailable(replies, &e),
        };
        let hot = &self.announcer.waiters.hot;
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
        match together {
            Ok(claimed) if conn.status == crate::protocol::TxStatus::Idle => {
                let sessions = replies.len();
                for (rows, reply) in claimed.split(sessions).into_iter().zip(replies) {
                    let _ = reply.send(Ok(rows));
                }
            }
            Ok(_) => {
                conn.broken = true;
                fail_all(replies, false, "the pop transaction did not commit");
            }
            Err(e @ (ExecError::Refused(_) | ExecError::Failed(_))) if replies.len() == 1 => {
                if let Some(reply) = replies.into_iter().next() {
                    let _ = reply.send(Err(e));
                }
            }
            Err(ExecError::Refused(_) | ExecError::Failed(_)) => {
                // Rolled back: each POP alone, so a failing one fails by
                // itself.
                for (plan, reply) in plans.into_iter().zip(replies) {
                    let calls = &mut Calls::new(&mut conn, CallEnd::Sync);
                    let result = hot.pop(calls, &plan, receipts, tenant, digest, false).await;
                    let _ = reply.send(result.map(|c| c.rows));
                }
            }
            // The connection broke: every POP of the call shares its
            // outcome (a lease taken then expires and its messages come
            // back; an AUTO ACK may have moved its cursor).
            Err(ExecError::Lost(e)) => {
                fail_all(replies, e.outcome_unknown(), &e.cause().to_string())
            }
        }
        pool::release(conn);
    }
}
