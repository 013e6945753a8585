//! PUSH fusion: per (tenant, queue), the statements waiting while a write
//! is in flight become one `log_push_v1` call: their rows for one
//! partition one segment, except a statement's rows its session framed
//! ahead (`PreparedPush::pre_encode`), which are a segment of their own.

use super::{fail_all, outcome, unavailable, Fuser};
use crate::backend::call::{CallEnd, Calls};
use crate::backend::pool;
use crate::engine::queues::{write_pushes, PreparedPush};
use crate::engine::wake::queue_key;
use crate::engine::ExecError;
use std::sync::Arc;
use tokio::sync::oneshot;
use uuid::Uuid;

pub(super) type Job = super::Job<PreparedPush, PreparedPush>;

impl Fuser {
    /// Writes a prepared PUSH (outside any transaction block) and returns
    /// it with its results, once committed.
    pub async fn push(
        self: &Arc<Self>,
        prep: PreparedPush,
        tenant: Uuid,
    ) -> Result<PreparedPush, ExecError> {
        let (reply, rx) = oneshot::channel();
        let key = (tenant, prep.queue.clone());
        let job = Job {
            statement: prep,
            reply,
        };
        if let Some(lane) = self.pushes.enqueue(key, job) {
            // A task of its own: a client that disconnects mid-write must
            // not abandon the statements fused with its own.
            let fuser = self.clone();
            tokio::spawn(async move {
                while let Some(jobs) = lane.next().await {
                    fuser.write_pushes(jobs, tenant).await;
                }
            });
        }
        outcome(rx).await
    }

    async fn write_pushes(&self, jobs: Vec<Job>, tenant: Uuid) {
        let (mut preps, replies): (Vec<PreparedPush>, Vec<_>) =
            jobs.into_iter().map(|j| (j.statement, j.reply)).unzip();
        let mut conn = match pool::checkout(&self.pool).await {
            Ok(c) => c,
            Err(e) => return unavailable(replies, &e),
        };
        let key = preps.first().map(|p| queue_key(tenant, &p.queue));
        // Each call commits (or rolls back) in its own round trip.
        let together = {
            let mut refs: Vec<&mut PreparedPush> = preps.iter_mut().collect();
            let sync = &mut Calls::new(&mut conn, CallEnd::Sync);
            write_pushes(sync, &mut refs, tenant, &self.sealing).await
        };
        // The partitions written, once committed: the hot list's rings
        // take them at once instead of reseeding to find them.
        let mut written = Vec::new();
        match together {
            Ok(()) if conn.status == crate::protocol::TxStatus::Idle => {
                for prep in &preps {
                    prep.written_partitions(&mut written);
                }
                for (prep, reply) in preps.into_iter().zip(replies) {
                    let _ = reply.send(Ok(prep));
                }
            }
            Ok(()) => {
                conn.broken = true;
                fail_all(replies, false, "the push transaction did not commit");
            }
            Err(e @ (ExecError::Refused(_) | ExecError::Failed(_))) => {
                if preps.len() == 1 {
                    // A lone statement's error is its own.
                    if let Some(reply) = replies.into_iter().next() {
                        let _ = reply.send(Err(e));
                    }
                } else {
                    // Rolled back: each statement alone, so the failing one
                    // fails by itself.
                    for (mut prep, reply) in preps.into_iter().zip(replies) {
                        prep.reset();
                        let result = write_pushes(
                            &mut Calls::new(&mut conn, CallEnd::Sync),
                            &mut [&mut prep],
                            tenant,
                            &self.sealing,
                        )
                        .await;
                        let _ = reply.send(result.map(|()| prep));
                    }
                }
            }
            // The connection broke: every statement of the write shares
            // its outcome, known or not.
            Err(ExecError::Lost(e)) => {
                fail_all(replies, e.outcome_unknown(), &e.cause().to_string())
            }
        }
        pool::release(conn);
        if let Some(key) = key {
            written.sort_unstable();
            written.dedup();
            self.announcer.pushed_into(&key, &written);
        }
    }
}
