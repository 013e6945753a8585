//! POP … WAIT: a POP that finds nothing waits for messages up to its WAIT,
//! parked without a backend connection when nothing of the session's holds
//! one, woken by a push to the queue (from this or another queenwire, see
//! `wake.rs`: one waiter of a group at a time, each passing the wake-up on
//! when it found messages), by a slow poll as the safety net against a lost
//! notification, or by the client's cancel request. When the server drains
//! (SIGTERM), a waiting POP ends at once with what it has (zero rows), and
//! a POP that starts during the drain does not wait. Each attempt goes
//! through the hot list (`hotlist/`): an attempt on a queue the ring knows
//! to be empty, with no wake-up since, costs no backend round trip until
//! the ring's periodic reseed is due. A wildcard POP (`wildcard.rs`) waits
//! the same way, woken by a push to any queue of its namespace.

use super::lend::Lender;
use super::values::Params;
use super::wildcard::NamespacePop;
use super::{fusion, pop, wake, Engine, ExecError, Outcome};
use crate::backend::call::Calls;
use crate::protocol::SqlError;
use crate::protocol::SqlState;
use crate::rewrite::build::pop::namespace_args;
use crate::rewrite::dialect::pop::Pop;
use std::pin::Pin;
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::futures::Notified;
use uuid::Uuid;

/// The first wait between two polls when no wake-up came, and the longest.
const WAIT_POLL_FIRST: Duration = Duration::from_millis(250);
const WAIT_POLL_MAX: Duration = Duration::from_secs(2);
/// The shortest wait for a parked partition that is due (or overdue: the
/// database's clock may run ahead of ours), so an answer that keeps it
/// parked cannot turn the wait into a busy loop.
const DUE_FLOOR: Duration = Duration::from_millis(20);

/// What a POP takes from: one queue, or a namespace's queues.
enum Target {
    Queue {
        plan: pop::PopPlan,
        digest: String,
        waiting: wake::Waiting,
    },
    Namespace(NamespacePop),
}

impl Engine {
    pub(super) async fn pop<L: Lender>(
        &self,
        lender: &mut L,
        stmt: &Pop,
        params: &[Option<String>],
        tenant: Uuid,
    ) -> Result<Outcome, ExecError> {
        let plan = pop::plan_pop(stmt, &Params(params), self.sealing.keys())?;
        let deadline = plan.wait.map(|w| Instant::now() + w);
        let waiters = &self.announcer.waiters;
        let target = match namespace_args(stmt, &Params(params))? {
            Some(scope) => Target::Namespace(NamespacePop { plan, scope }),
            None => {
                let queue_key = wake::queue_key(tenant, &plan.queue);
                // A POP naming its partition cannot take what a wake-up
                // meant for its group's other partitions.
                let waiting = if plan.named_partition() {
                    waiters.every(&queue_key)
                } else {
                    waiters.group(&queue_key, plan.group())
                };
                Target::Queue {
                    digest: waiters.digest(&queue_key),
                    waiting,
                    plan,
                }
            }
        };
        // Inside a block (or a pipeline's implicit transaction) the ring
        // cannot see the snapshot or a rollback: it drops nothing then.
        let in_block = !lender.view().detached();
        let mut wait = WaitState {
            poll: WAIT_POLL_FIRST,
            was_woken: false,
        };
        let fused = matches!(&target, Target::Queue { plan, .. } if fusion::pop_fusable(plan));
        if in_block || !fused {
            self.fuser.release_held().await;
        }
        loop {
            // A POP of one partition with nothing of the session's on a
            // backend is claimed together with the other sessions' POPs
            // of the same shape (`fusion/pop.rs`), on the fuser's own
            // connection.
            if let (
                false,
                Target::Queue {
                    plan,
                    digest,
                    waiting,
                },
            ) = (in_block, &target)
            {
                if fusion::pop_fusable(plan) {
                    let mut woken = Box::pin(waiting.notify().notified());
                    woken.as_mut().enable();
                    let rows = self
                        .fuser
                        .pop(plan, &self.receipts, tenant, digest)
                        .await
                        .map_err(fusion::as_session_error)?;
                    let attempt = Attempt {
                        rows,
                        woken: vec![woken],
                        waiting: Some(waiting),
                        due: waiters.hot.next_due(tenant, &plan.queue, plan.group()),
                    };
                    if let Some(done) = self.after(lender, attempt, deadline, &mut wait).await? {
                        return Ok(done);
                    }
                    continue;
                }
            }
            let end = lender.call_end();
            let conn = lender.connection().await.map_err(|e| {
                ExecError::Refused(SqlError::error(
                    SqlState::CONNECTION_FAILURE,
                    format!("no backend connection for POP: {e}"),
                ))
            })?;
            let mut calls = Calls::new(conn, end);
            // A wildcard POP waits on every queue of its namespace as it is
            // now; a queue that joins it during the wait is found by the
            // next poll.
            let listed = match &target {
                Target::Namespace(ns) => ns.queues(&mut calls, tenant).await?,
                Target::Queue { .. } => Vec::new(),
            };
            let every: Vec<wake::Waiting> = match &target {
                Target::Queue { .. } => Vec::new(),
                Target::Namespace(_) => listed
                    .iter()
                    .map(|q| waiters.every(&wake::queue_key(tenant, &q.queue_name)))
                    .collect(),
            };
            let notifies: Vec<&wake::Waiting> = match &target {
                Target::Queue { waiting, .. } => vec![waiting],
                Target::Namespace(_) => every.iter().collect(),
            };
            // Registered before the attempt, so a push that lands between
            // the attempt and the wait still wakes it.
            let woken: Vec<Pin<Box<Notified<'_>>>> = notifies
                .iter()
                .map(|n| {
                    let mut w = Box::pin(n.notify().notified());
                    w.as_mut().enable();
                    w
                })
                .collect();
            let rows = match &target {
                Target::Queue { plan, digest, .. } => {
                    waiters
                        .hot
                        .pop(&mut calls, plan, &self.receipts, tenant, digest, in_block)
                        .await?
                        .rows
                }
                Target::Namespace(ns) => {
                    ns.attempt(
                        self,
                        &mut calls,
                        &listed,
                        waiters,
                        &self.receipts,
                        tenant,
                        in_block,
                    )
                    .await?
                }
            };
            let attempt = Attempt {
                rows,
                woken,
                waiting: match &target {
                    Target::Queue { waiting, .. } => Some(waiting),
                    Target::Namespace(_) => None,
                },
                due: match &target {
                    Target::Queue { plan, .. } => {
                        waiters.hot.next_due(tenant, &plan.queue, plan.group())
                    }
                    Target::Namespace(_) => None,
                },
            };
            if let Some(done) = self.after(lender, attempt, deadline, &mut wait).await? {
                return Ok(done);
            }
        }
    }

    /// After an attempt: the POP's result when it found rows, its WAIT is
    /// over or the server drains (a woken waiter that found rows passes
    /// the wake-up on); else the wait until the next attempt.
    async fn after<'w, L: Lender>(
        &self,
        lender: &mut L,
        attempt: Attempt<'w>,
        deadline: Option<Instant>,
        wait: &mut WaitState,
    ) -> Result<Option<Outcome>, ExecError> {
        let remaining = deadline
            .map(|d| d.saturating_duration_since(Instant::now()))
            .unwrap_or_default();
        let Attempt {
            rows,
            woken,
            waiting,
            due,
        } = attempt;
        if !rows.is_empty() || remaining.is_zero() || self.draining.has_begun() {
            if let (false, true, Some(waiting)) = (rows.is_empty(), wait.was_woken, waiting) {
                drop(woken);
                waiting.pass_on();
            }
            return Ok(Some(found(rows)));
        }
        // A parked partition coming back (a lease ending, a retry delay
        // passing) is looked at when it does, not at the next poll.
        let until_due = due.map(|d| {
            d.duration_since(SystemTime::now())
                .unwrap_or_default()
                .max(DUE_FLOOR)
        });
        let poll = wait
            .poll
            .min(remaining)
            .min(until_due.unwrap_or(Duration::MAX));
        match self.wait_for(lender, woken, poll).await? {
            Wait::Woken => wait.was_woken = true,
            Wait::Timeout => wait.poll = (wait.poll * 2).min(WAIT_POLL_MAX),
            Wait::Draining => return Ok(Some(found(Vec::new()))),
        }
        Ok(None)
    }

    /// Waits, without a backend connection when nothing of the session's
    /// holds one, for a wake-up, `poll`, the drain or the client's cancel.
    async fn wait_for<L: Lender>(
        &self,
        lender: &mut L,
        mut woken: Vec<Pin<Box<Notified<'_>>>>,
        poll: Duration,
    ) -> Result<Wait, ExecError> {
        lender.park().await?;
        let cancel = lender.cancel_signal();
        let _mark = cancel.waiting();
        let cancelled = cancel.notify.notified();
        let draining = self.draining.begun();
        let any_woken = async {
            if woken.is_empty() {
                std::future::pending::<()>().await;
            } else {
                futures::future::select_all(woken.iter_mut()).await;
            }
        };
        tokio::select! {
            () = draining => Ok(Wait::Draining),
            () = any_woken => Ok(Wait::Woken),
            _ = tokio::time::sleep(poll) => Ok(Wait::Timeout),
            _ = cancelled => Err(ExecError::Refused(SqlError::error(
                SqlState::QUERY_CANCELED,
                "canceling statement due to user request",
            ))),
        }
    }
}

/// One attempt's rows, with the wake-ups registered before it, the
/// queue's waiters (a single-queue POP) to pass a wake-up on to and when
/// its ring's soonest parked partition comes back.
struct Attempt<'w> {
    rows: Vec<Vec<crate::engine::values::Cell>>,
    woken: Vec<Pin<Box<Notified<'w>>>>,
    waiting: Option<&'w wake::Waiting>,
    /// When a parked partition of the POP's ring comes back.
    due: Option<SystemTime>,
}

/// Between the attempts of a POP … WAIT: the next poll interval, and
/// whether a wake-up (not a poll) started the current attempt.
struct WaitState {
    poll: Duration,
    was_woken: bool,
}

/// How a wait ended.
enum Wait {
    Woken,
    Timeout,
    Draining,
}

/// A POP's result.
fn found(rows: Vec<Vec<crate::engine::values::Cell>>) -> Outcome {
    Outcome {
        tag: format!("SELECT {}", rows.len()),
        rows,
        pushed: None,
        ephemeral_commit: None,
    }
}
