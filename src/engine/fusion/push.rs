//! PUSH fusion: per tenant, the statements waiting while a write is in
//! flight become one `log_push_many_v1` call, whatever their queues: their
//! rows for one (queue, partition) one segment, except a statement's rows
//! its session framed ahead (`PreparedPush::pre_encode`), which are a
//! segment of their own. One commit for them all.
//!
//! One write at a time per tenant means that a write waiting for a lock
//! (a client's transaction block holding a partition it pushed to, an
//! ALTER or DROP QUEUE in progress) would hold up every queue of the
//! tenant. So the call waits for a lock at most 100 ms (`lock_timeout` of
//! `log_push_many_v1`); when it fails, its statements are written again
//! queue by queue, each queue in a lane of its own with no time limit, and
//! those queues stay "aside" (their statements go to their own lane) until
//! that lane has nothing left to write, so a queue held by a lock waits
//! alone and the others rejoin the tenant's write at once.

use super::{fail_all, lock, outcome, unavailable, Fuser, Job as FusedJob};
use crate::backend::call::{CallEnd, Calls};
use crate::backend::pool;
use crate::engine::queues::{write_fused, write_pushes, PreparedPush};
use crate::engine::wake::queue_key;
use crate::engine::ExecError;
use crate::protocol::{SqlState, TxStatus};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::oneshot;
use uuid::Uuid;

pub(super) type Job = FusedJob<PreparedPush, PreparedPush>;

impl Fuser {
    /// Writes a prepared PUSH (outside any transaction block) and returns
    /// it with its results, once committed.
    pub async fn push(
        self: &Arc<Self>,
        prep: PreparedPush,
        tenant: Uuid,
    ) -> Result<PreparedPush, ExecError> {
        let (reply, rx) = oneshot::channel();
        let aside = {
            // Usually none is: no key built for the lookup then.
            let set = lock(&self.aside);
            !set.is_empty() && set.contains(&(tenant, prep.queue.clone()))
        };
        let job = Job {
            statement: prep,
            reply,
        };
        if aside {
            self.push_alone(job, tenant, true);
        } else if let Some(lane) = self.pushes.enqueue(tenant, job) {
            // A task of its own: a client that disconnects mid-write must
            // not abandon the statements fused with its own.
            let fuser = self.clone();
            tokio::spawn(async move {
                while let Some(jobs) = lane.next().await {
                    fuser.write_tenant(jobs, tenant).await;
                }
            });
        }
        outcome(rx).await
    }

    /// Queues a statement in its queue's own lane (`session`: sent by its
    /// session, not handed over by the tenant's writer).
    fn push_alone(self: &Arc<Self>, job: Job, tenant: Uuid, session: bool) {
        let key = (tenant, job.statement.queue.clone());
        if let Some(lane) = self.queue_pushes.enqueue_from(key.clone(), job, session) {
            let fuser = self.clone();
            tokio::spawn(async move {
                while let Some(jobs) = lane.next().await {
                    fuser.write_queue(jobs, tenant).await;
                }
                // Nothing left of it: back to the tenant's write.
                lock(&fuser.aside).remove(&key);
            });
        }
    }

    /// One write of the tenant's lane.
    async fn write_tenant(self: &Arc<Self>, jobs: Vec<Job>, tenant: Uuid) {
        // Statements of a queue set aside since they were queued.
        let (jobs, aside): (Vec<Job>, Vec<Job>) = {
            let set = lock(&self.aside);
            if set.is_empty() {
                (jobs, Vec::new())
            } else {
                jobs.into_iter()
                    .partition(|j| !set.contains(&(tenant, j.statement.queue.clone())))
            }
        };
        for job in aside {
            self.push_alone(job, tenant, false);
        }
        let Some((jobs, e)) = self.write_once(jobs, tenant, true).await else {
            return;
        };
        let waited = matches!(&e, ExecError::Refused(s) | ExecError::Failed(s)
            if s.state == SqlState::LOCK_NOT_AVAILABLE);
        if jobs.len() == 1 && !waited {
            return fail_with(jobs, e);
        }
        // Rolled back: written again queue by queue, where the failing
        // statement fails alone and a wait for a lock holds up its queue
        // only.
        if waited {
            let mut set = lock(&self.aside);
            for job in &jobs {
                set.insert((tenant, job.statement.queue.clone()));
            }
        }
        for job in jobs {
            self.push_alone(job, tenant, false);
        }
    }

    /// One write of a queue's own lane: one `log_push_v1` call, and when
    /// it fails, each statement alone.
    async fn write_queue(&self, jobs: Vec<Job>, tenant: Uuid) {
        let Some((jobs, e)) = self.write_once(jobs, tenant, false).await else {
            return;
        };
        if jobs.len() == 1 {
            return fail_with(jobs, e);
        }
        // Rolled back: each statement alone, so the failing one fails by
        // itself.
        for job in jobs {
            if let Some((job, e)) = self.write_once(vec![job], tenant, false).await {
                fail_with(job, e);
            }
        }
    }

    /// Writes statements in one call and one commit (`fused`: of any
    /// queues, by `log_push_many_v1`) and answers them, unless the write
    /// failed and was rolled back: then they are given back, reset, with
    /// the error.
    async fn write_once(
        &self,
        jobs: Vec<Job>,
        tenant: Uuid,
        fused: bool,
    ) -> Option<(Vec<Job>, ExecError)> {
        if jobs.is_empty() {
            return None;
        }
        let (mut preps, replies): (Vec<PreparedPush>, Vec<_>) =
            jobs.into_iter().map(|j| (j.statement, j.reply)).unzip();
        let mut conn = match pool::checkout(&self.pool).await {
            Ok(c) => c,
            Err(e) => {
                unavailable(replies, &e);
                return None;
            }
        };
        // The call commits (or rolls back) in its own round trip.
        let written = {
            let mut refs: Vec<&mut PreparedPush> = preps.iter_mut().collect();
            let sync = &mut Calls::new(&mut conn, CallEnd::Sync);
            if fused {
                write_fused(sync, &mut refs, tenant, &self.sealing, &self.placed).await
            } else {
                write_pushes(sync, &mut refs, tenant, &self.sealing).await
            }
        };
        let idle = conn.status() == TxStatus::Idle;
        if written.is_ok() && !idle {
            conn.do_not_reuse();
        }
        pool::release(conn);
        match written {
            Ok(()) if idle => self.answer(preps, replies, tenant),
            Ok(()) => fail_all(replies, false, "the push transaction did not commit"),
            Err(e @ (ExecError::Refused(_) | ExecError::Failed(_))) => {
                let jobs = preps
                    .into_iter()
                    .zip(replies)
                    .map(|(mut statement, reply)| {
                        statement.reset();
                        Job { statement, reply }
                    })
                    .collect();
                return Some((jobs, e));
            }
            // The connection broke: every statement of the write shares
            // its outcome, known or not.
            Err(ExecError::Lost(e)) => {
                fail_all(replies, e.outcome_unknown(), &e.cause().to_string())
            }
        }
        None
    }

    /// Answers committed statements and tells the hot list the partitions
    /// they wrote, per queue (its rings take them at once instead of
    /// reseeding to find them).
    fn answer(
        &self,
        preps: Vec<PreparedPush>,
        replies: Vec<oneshot::Sender<Result<PreparedPush, ExecError>>>,
        tenant: Uuid,
    ) {
        let mut written: HashMap<String, Vec<i64>> = HashMap::new();
        for prep in &preps {
            prep.written_partitions(written.entry(prep.queue.clone()).or_default());
        }
        for (prep, reply) in preps.into_iter().zip(replies) {
            let _ = reply.send(Ok(prep));
        }
        for (queue, mut ids) in written {
            ids.sort_unstable();
            ids.dedup();
            self.announcer.pushed_into(&queue_key(tenant, &queue), &ids);
        }
    }
}

/// Fails the lone statement of a write with the write's error: it is its
/// own.
fn fail_with(jobs: Vec<Job>, e: ExecError) {
    if let Some(job) = jobs.into_iter().next() {
        let _ = job.reply.send(Err(e));
    }
}
