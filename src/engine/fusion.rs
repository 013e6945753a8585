//! Push fusion: PUSH statements that arrive for one queue while a write to
//! it is in flight are written together, by the next write, in one
//! `log_push_v1` call and one transaction — one commit (and one WAL flush)
//! for many statements, and one segment per partition for all their rows.
//!
//! A lone PUSH is written at once (it leads its own write), so fusion costs
//! it nothing; statements queue only behind a write already in flight. Only
//! statements outside a transaction block are fused (inside one, a PUSH
//! belongs to the client's transaction). If a fused write fails, it is
//! rolled back and each statement is written again alone, so one
//! statement's failure never fails another's.

use super::queues::{write_pushes, PreparedPush};
use super::sealing::Sealing;
use super::wake::{queue_key, Announcer};
use super::ExecError;
use crate::backend::call::{CallEnd, Calls};
use crate::backend::{pool, BackendError, Pool};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;
use uuid::Uuid;

/// At most this many statements share one write: bounds the size of one
/// call and the time a statement waits for its batch-mates.
const MAX_FUSED_STATEMENTS: usize = 256;

/// (tenant, queue).
type LaneKey = (Uuid, String);

type Reply = oneshot::Sender<Result<PreparedPush, ExecError>>;

#[derive(Default)]
struct Lane {
    waiting: Vec<(PreparedPush, Reply)>,
    writing: bool,
}

pub struct Fuser {
    pool: Pool,
    announcer: Announcer,
    sealing: Arc<Sealing>,
    lanes: Mutex<HashMap<LaneKey, Arc<Mutex<Lane>>>>,
}

impl Fuser {
    pub fn new(pool: Pool, announcer: Announcer, sealing: Arc<Sealing>) -> Fuser {
        Fuser {
            pool,
            announcer,
            sealing,
            lanes: Mutex::new(HashMap::new()),
        }
    }

    fn lane(&self, tenant: Uuid, queue: &str) -> Arc<Mutex<Lane>> {
        let mut lanes = match self.lanes.lock() {
            Ok(l) => l,
            Err(p) => p.into_inner(),
        };
        lanes
            .entry((tenant, queue.to_string()))
            .or_default()
            .clone()
    }

    /// Writes a prepared PUSH (outside any transaction block) and returns
    /// it with its results, once committed.
    pub async fn push(
        self: &Arc<Self>,
        prep: PreparedPush,
        tenant: Uuid,
    ) -> Result<PreparedPush, ExecError> {
        let lane = self.lane(tenant, &prep.queue);
        let (tx, rx) = oneshot::channel();
        let lead = {
            let mut l = lock(&lane);
            l.waiting.push((prep, tx));
            !std::mem::replace(&mut l.writing, true)
        };
        if lead {
            // A task of its own: a client that disconnects mid-write must
            // not abandon the statements fused with its own.
            let fuser = self.clone();
            tokio::spawn(async move { fuser.write_loop(lane, tenant).await });
        }
        // A writer that stopped may have been mid-write.
        rx.await
            .unwrap_or_else(|_| Err(lost(true, "the push writer stopped")))
    }

    async fn write_loop(&self, lane: Arc<Mutex<Lane>>, tenant: Uuid) {
        loop {
            let jobs: Vec<(PreparedPush, Reply)> = {
                let mut l = lock(&lane);
                if l.waiting.is_empty() {
                    l.writing = false;
                    return;
                }
                let n = l.waiting.len().min(MAX_FUSED_STATEMENTS);
                l.waiting.drain(..n).collect()
            };
            self.write(jobs, tenant).await;
        }
    }

    async fn write(&self, jobs: Vec<(PreparedPush, Reply)>, tenant: Uuid) {
        let mut conn = match crate::backend::pool::checkout(&self.pool).await {
            Ok(c) => c,
            Err(e) => {
                // One cause, told to every statement of the batch.
                let why = e.to_string();
                for (_, reply) in jobs {
                    let _ = reply.send(Err(ExecError::Lost(BackendError::Protocol(why.clone()))));
                }
                return;
            }
        };
        let key = jobs.first().map(|(p, _)| queue_key(tenant, &p.queue));
        let (mut preps, replies): (Vec<PreparedPush>, Vec<Reply>) = jobs.into_iter().unzip();
        // Each call commits (or rolls back) in its own round trip.
        let together = {
            let mut refs: Vec<&mut PreparedPush> = preps.iter_mut().collect();
            let sync = &mut Calls::new(&mut conn, CallEnd::Sync);
            write_pushes(sync, &mut refs, tenant, &self.sealing).await
        };
        match together {
            Ok(()) if conn.status == crate::protocol::TxStatus::Idle => {
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
            self.announcer.pushed(&key);
        }
    }
}

/// Fails every statement of a write; `unknown`: it may have committed.
fn fail_all(replies: Vec<Reply>, unknown: bool, why: &str) {
    for reply in replies {
        let _ = reply.send(Err(lost(unknown, why)));
    }
}

fn lost(unknown: bool, why: &str) -> ExecError {
    let cause = BackendError::Protocol(why.to_string());
    ExecError::Lost(if unknown {
        BackendError::OutcomeUnknown(Box::new(cause))
    } else {
        cause
    })
}

fn lock(lane: &Mutex<Lane>) -> std::sync::MutexGuard<'_, Lane> {
    match lane.lock() {
        Ok(l) => l,
        Err(p) => p.into_inner(),
    }
}
