//! ACK fusion: per tenant, the plain ACKs (not FAILED) waiting while a
//! write is in flight become one `log_ack_v1` call. The procedure answers
//! each receipt on its own (grouped by partition and consumer group, in
//! lock order), so a receipt's status is the one it gets alone: a receipt
//! acked twice in one call is `acked` twice, as when the two ACKs run one
//! after the other.

use super::{fail_all, outcome, unavailable, Fuser};
use crate::backend::call::{CallEnd, Calls};
use crate::backend::pool;
use crate::engine::acks::ack_receipts;
use crate::engine::receipt::Receipt;
use crate::engine::ExecError;
use std::sync::Arc;
use tokio::sync::oneshot;
use uuid::Uuid;

pub(super) type Job = super::Job<Vec<Receipt>, Vec<String>>;

impl Fuser {
    /// Acknowledges the receipts of a plain ACK outside any transaction
    /// block; the status of each, in order, once committed.
    pub async fn ack(
        self: &Arc<Self>,
        receipts: Vec<Receipt>,
        tenant: Uuid,
    ) -> Result<Vec<String>, ExecError> {
        let (reply, rx) = oneshot::channel();
        let job = Job {
            statement: receipts,
            reply,
        };
        if let Some(lane) = self.acks.enqueue(tenant, job) {
            let fuser = self.clone();
            tokio::spawn(async move {
                while let Some(jobs) = lane.next().await {
                    fuser.write_acks(jobs, tenant).await;
                }
            });
        }
        outcome(rx).await
    }

    async fn write_acks(&self, jobs: Vec<Job>, tenant: Uuid) {
        let mut sizes = Vec::with_capacity(jobs.len());
        let mut replies = Vec::with_capacity(jobs.len());
        let mut receipts = Vec::new();
        for job in jobs {
            sizes.push(job.statement.len());
            receipts.extend(job.statement);
            replies.push(job.reply);
        }
        let mut conn = match pool::checkout(&self.pool).await {
            Ok(c) => c,
            Err(e) => return unavailable(replies, &e),
        };
        let together = ack_receipts(
            &mut Calls::new(&mut conn, CallEnd::Sync),
            &receipts,
            false,
            None,
            tenant,
        )
        .await;
        match together {
            Ok(status) if conn.status == crate::protocol::TxStatus::Idle => {
                self.released(&receipts);
                let mut status = status.into_iter();
                for (n, reply) in sizes.into_iter().zip(replies) {
                    let _ = reply.send(Ok(status.by_ref().take(n).collect()));
                }
            }
            Ok(_) => {
                conn.broken = true;
                fail_all(replies, false, "the ack transaction did not commit");
            }
            Err(e @ (ExecError::Refused(_) | ExecError::Failed(_))) if replies.len() == 1 => {
                // A lone statement's error is its own.
                if let Some(reply) = replies.into_iter().next() {
                    let _ = reply.send(Err(e));
                }
            }
            Err(ExecError::Refused(_) | ExecError::Failed(_)) => {
                // Rolled back: each statement alone, so the failing one
                // fails by itself.
                let mut from = 0;
                for (n, reply) in sizes.into_iter().zip(replies) {
                    let own = &receipts[from..from + n];
                    from += n;
                    let calls = &mut Calls::new(&mut conn, CallEnd::Sync);
                    let result = ack_receipts(calls, own, false, None, tenant).await;
                    if result.is_ok() {
                        self.released(own);
                    }
                    let _ = reply.send(result);
                }
            }
            // The connection broke: every statement of the write shares
            // its outcome, known or not.
            Err(ExecError::Lost(e)) => {
                fail_all(replies, e.outcome_unknown(), &e.cause().to_string())
            }
        }
        pool::release(conn);
    }

    /// Tells the hot list that these receipts' leases may be gone.
    fn released(&self, receipts: &[Receipt]) {
        let partitions: Vec<(i64, &str)> = receipts
            .iter()
            .map(|r| (r.partition_id, r.group.as_str()))
            .collect();
        self.announcer.waiters.hot.acked(&partitions, true);
    }
}
