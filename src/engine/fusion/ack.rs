//! ACK fusion: per tenant, the plain ACKs (not FAILED) waiting while a
//! write is in flight become one `log_ack_v1` call. The procedure answers
//! each receipt on its own (grouped by partition and consumer group, in
//! lock order), so a receipt's status is the one it gets alone: a receipt
//! acked twice in one call is `acked` twice, as when the two ACKs run one
//! after the other.
//!
//! A session whose last POP was fused sends its ACK to that POP's lane
//! instead (`pop.rs`): the consumer that pops and acks in a loop then
//! comes back to one lane, whose writes carry its ACK and the next POPs in
//! one transaction.

use super::{outcome, Batch, Fuser};
use crate::backend::call::{CallEnd, Calls};
use crate::backend::pool;
use crate::backend::BackendConn;
use crate::engine::acks::ack_receipts;
use crate::engine::receipt::Receipt;
use crate::engine::ExecError;
use std::sync::Arc;
use tokio::sync::oneshot;
use uuid::Uuid;

pub(super) type Job = super::AckJob;

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
        if let Some(via) = self.last_pop_lane(tenant) {
            // The session that acks may have a claim held for its next POP
            // (`hold.rs`).
            self.enqueue_pop_lane(via, super::pop::Job::Ack(job, tokio::task::try_id()));
        } else if let Some(lane) = self.acks.enqueue(tenant, job) {
            let fuser = self.clone();
            tokio::spawn(async move {
                while let Some(jobs) = lane.next().await {
                    fuser.write_acks(Batch::of(jobs), tenant).await;
                }
            });
        }
        outcome(rx).await
    }

    pub(super) async fn write_acks(&self, batch: Batch, tenant: Uuid) {
        let mut conn = match pool::checkout(&self.pool).await {
            Ok(c) => c,
            Err(e) => return batch.unavailable(&e),
        };
        let together = ack_receipts(
            &mut Calls::new(&mut conn, CallEnd::Sync),
            &batch.receipts,
            false,
            None,
            tenant,
        )
        .await;
        match together {
            Ok(status) if conn.status() == crate::protocol::TxStatus::Idle => {
                self.released(&batch.receipts);
                batch.answer(status);
            }
            Ok(_) => {
                conn.do_not_reuse();
                batch.fail(false, "the ack transaction did not commit");
            }
            Err(e @ (ExecError::Refused(_) | ExecError::Failed(_))) if batch.replies.len() == 1 => {
                // A lone statement's error is its own.
                if let Some(reply) = batch.replies.into_iter().next() {
                    let _ = reply.send(Err(e));
                }
            }
            Err(ExecError::Refused(_) | ExecError::Failed(_)) => {
                self.ack_each(&mut conn, batch, tenant).await;
            }
            // The connection broke: every statement of the write shares
            // its outcome, known or not.
            Err(ExecError::Lost(e)) => batch.fail(e.outcome_unknown(), &e.cause().to_string()),
        }
        pool::release(conn);
    }

    /// After a write of them rolled back: each statement alone, so the
    /// failing one fails by itself. (A receipt a committed write already
    /// acked is `acked` again: its lease's history says so.)
    pub(super) async fn ack_each(&self, conn: &mut BackendConn, batch: Batch, tenant: Uuid) {
        let mut from = 0;
        for (n, reply) in batch.sizes.into_iter().zip(batch.replies) {
            let own = &batch.receipts[from..from + n];
            from += n;
            let calls = &mut Calls::new(conn, CallEnd::Sync);
            let result = ack_receipts(calls, own, false, None, tenant).await;
            if result.is_ok() {
                self.released(own);
            }
            let _ = reply.send(result);
        }
    }

    /// Tells the hot list that these receipts' leases may be gone.
    pub(super) fn released(&self, receipts: &[Receipt]) {
        let partitions: Vec<(i64, &str)> = receipts
            .iter()
            .map(|r| (r.partition_id, r.group.as_str()))
            .collect();
        self.announcer.waiters.hot.acked(&partitions, true);
    }
}
