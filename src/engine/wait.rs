//! POP … WAIT: a POP that finds nothing waits for messages up to its WAIT,
//! parked without a backend connection when nothing of the session's holds
//! one, woken by a push to the queue (from this or another queenwire, see
//! `wake.rs`), by a slow poll as the safety net against a lost
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
use super::{pop, wake, Engine, ExecError, Outcome};
use crate::backend::call::Calls;
use crate::protocol::SqlError;
use crate::protocol::SqlState;
use crate::rewrite::calls::namespace::namespace_args;
use crate::rewrite::dialect::pop::Pop;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::futures::Notified;
use tokio::sync::Notify;
use uuid::Uuid;

/// The first wait between two polls when no wake-up came, and the longest.
const WAIT_POLL_FIRST: Duration = Duration::from_millis(250);
const WAIT_POLL_MAX: Duration = Duration::from_secs(2);

/// What a POP takes from: one queue, or a namespace's queues.
enum Target {
    Queue {
        plan: pop::PopPlan,
        digest: String,
        notify: Arc<Notify>,
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
                Target::Queue {
                    digest: waiters.digest(&queue_key),
                    notify: waiters.notify_for(&queue_key),
                    plan,
                }
            }
        };
        // Inside a block (or a pipeline's implicit transaction) the ring
        // cannot see the snapshot or a rollback: it drops nothing then.
        let in_block = !lender.view().detached();
        let mut poll = WAIT_POLL_FIRST;
        loop {
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
            let notifies: Vec<Arc<Notify>> = match &target {
                Target::Queue { notify, .. } => vec![notify.clone()],
                Target::Namespace(_) => listed
                    .iter()
                    .map(|q| waiters.notify_for(&wake::queue_key(tenant, &q.queue_name)))
                    .collect(),
            };
            // Registered before the attempt, so a push that lands between
            // the attempt and the wait still wakes it.
            let mut woken: Vec<Pin<Box<Notified<'_>>>> = notifies
                .iter()
                .map(|n| {
                    let mut w = Box::pin(n.notified());
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
            let remaining = deadline
                .map(|d| d.saturating_duration_since(Instant::now()))
                .unwrap_or_default();
            if !rows.is_empty() || remaining.is_zero() || self.draining.has_begun() {
                return Ok(Outcome {
                    tag: format!("SELECT {}", rows.len()),
                    rows,
                    pushed: None,
                    ephemeral_commit: None,
                });
            }
            lender.park().await?;
            let cancel = lender.cancel_signal();
            let cancelled = cancel.notified();
            let draining = self.draining.begun();
            let any_woken = async {
                if woken.is_empty() {
                    std::future::pending::<()>().await;
                } else {
                    futures::future::select_all(woken.iter_mut()).await;
                }
            };
            tokio::select! {
                () = draining => {
                    return Ok(Outcome {
                        tag: "SELECT 0".into(),
                        rows: Vec::new(),
                        pushed: None,
                        ephemeral_commit: None,
                    });
                }
                () = any_woken => {}
                _ = tokio::time::sleep(poll.min(remaining)) => {
                    poll = (poll * 2).min(WAIT_POLL_MAX);
                }
                _ = cancelled => {
                    return Err(ExecError::Refused(SqlError::error(
                        SqlState::QUERY_CANCELED,
                        "canceling statement due to user request",
                    )));
                }
            }
        }
    }
}
