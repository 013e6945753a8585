//! The operations on an owned queue's store, shared by this process's own
//! statements (`exec.rs`) and those other queenwires forward (`owner.rs`),
//! and POP's wait, which runs here or at the owner.

use super::forward::{mismatched, Attempt};
use super::store::{Delivered, NewMessage, Pushed};
use super::wire::{Item, Op, PopSpec, Reply, Request};
use super::{lock, wall, Ephemeral, Leftover, Owned, Route};
use crate::protocol::{SqlError, SqlState};
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::Notify;
use uuid::Uuid;

/// The first wait between two looks of a POP … WAIT when no PUSH woke it.
const WAIT_POLL: Duration = Duration::from_millis(500);

pub(super) fn overflow(reason: String) -> SqlError {
    SqlError::error(SqlState::PROGRAM_LIMIT_EXCEEDED, reason)
}

fn gone(queue: &str) -> SqlError {
    SqlError::error(
        SqlState::UNDEFINED_OBJECT,
        format!("queue \"{queue}\" does not exist"),
    )
}

/// The owned queue, if it is `tenant`'s.
fn of_tenant<'a>(o: &'a Owned, tenant: Uuid, queue: &str) -> Result<&'a Owned, SqlError> {
    match o.tenant == tenant {
        true => Ok(o),
        false => Err(gone(queue)),
    }
}

/// PUSH outside a block: the messages' sequence numbers.
pub(super) fn push(o: &Owned, messages: Vec<NewMessage>) -> Result<Vec<Pushed>, SqlError> {
    let result = lock(&o.store).push(messages, Instant::now());
    let pushed = result.map_err(|o| overflow(o.reason))?;
    o.pushed.notify_waiters();
    Ok(pushed)
}

/// PUSH inside a block: would it fit now?
pub(super) fn fit(o: &Owned, count: u64, bytes: u64) -> Result<(), SqlError> {
    lock(&o.store)
        .check_fit(count, bytes)
        .map_err(|o| overflow(o.reason))
}

/// The messages of a committed block (a COMMIT cannot fail any more: what
/// no longer fits is dropped and logged).
pub(super) fn apply(o: &Owned, messages: Vec<NewMessage>) {
    let result = lock(&o.store).push(messages, Instant::now());
    match result {
        Ok(_) => o.pushed.notify_waiters(),
        Err(overflow) => tracing::warn!(queue = %o.queue, reason = %overflow.reason,
            "an ephemeral PUSH committed but no longer fits: its messages are dropped"),
    }
}

/// ACK of receipts of `tenant`'s: each one's status (`stale` for another
/// tenant's queue).
pub(super) fn ack(o: &Owned, tenant: Uuid, items: &[Item], failed: bool) -> Vec<String> {
    let mut store = lock(&o.store);
    items
        .iter()
        .map(|i| match o.tenant == tenant {
            true => store
                .ack(&i.group, i.seq, i.token, failed, Instant::now())
                .to_string(),
            false => "stale".to_string(),
        })
        .collect()
}

/// RENEW: each lease's new expiry (`None`: not held, or another tenant's).
pub(super) fn renew(
    o: &Owned,
    tenant: Uuid,
    items: &[Item],
    extend: Option<Duration>,
) -> Vec<Option<SystemTime>> {
    let mut store = lock(&o.store);
    items
        .iter()
        .map(|i| match o.tenant == tenant {
            true => store.renew(&i.group, i.seq, i.token, extend, Instant::now(), wall()),
            false => None,
        })
        .collect()
}

/// This process cannot tell now whether it owns the queue (its database
/// connection is down): to a forwarding queenwire that is "not the owner",
/// so it looks the owner up again (and, once this process's lease has run
/// out, elects another).
fn unelectable(e: &SqlError) -> bool {
    e.code() == SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE.code()
}

/// How a POP ended.
pub(super) enum Popped {
    Rows(Vec<Delivered>),
    /// Only when not forwarding: another process owns the queue (nothing
    /// was taken).
    NotOwner,
}

impl Ephemeral {
    /// POP of queue `ref_` of `tenant`, waiting at most `wait` (none: one
    /// look) for messages, wherever the queue lives (forwarded to its owner
    /// when `forward`; else [`Popped::NotOwner`]). `cancel` ends a wait
    /// with 57014; `stop` (the forwarding side's drain) and this process's
    /// drain end it with no rows.
    pub(super) async fn pop(
        &self,
        (tenant, ref_, queue): (Uuid, i64, &str),
        spec: &PopSpec,
        wait: Option<Duration>,
        (cancel, stop): (&Notify, Option<&Notify>),
        forward: bool,
    ) -> Result<Popped, SqlError> {
        let since = Instant::now();
        let deadline = wait.map(|w| since + w);
        loop {
            let remaining = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            // Blocks that ended before this POP are settled first (here:
            // those forwarded were settled before their session went on).
            self.settled_for(ref_).await;
            let owned = match self.route(ref_, queue).await? {
                Route::Local(o) => o,
                Route::Remote(_) if !forward => return Ok(Popped::NotOwner),
                Route::Remote(peer) => {
                    let op = Op::Pop {
                        spec: spec.clone(),
                        wait: remaining,
                    };
                    match self
                        .attempt(&peer, (tenant, ref_, queue), op, Some(cancel), since)
                        .await?
                    {
                        Attempt::Again => continue,
                        Attempt::Reply(Reply::Delivered(rows)) => return Ok(Popped::Rows(rows)),
                        Attempt::Reply(_) => return Err(mismatched(&peer)),
                    }
                }
            };
            of_tenant(&owned, tenant, queue)?;
            let woken = owned.pushed.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let delivered = lock(&owned.store).pop(
                &spec.group,
                spec.start,
                spec.limit as usize,
                spec.partitions as usize,
                spec.lease,
                spec.auto_ack,
                Instant::now(),
                wall(),
            );
            let remaining = remaining.unwrap_or_default();
            if !delivered.is_empty() || remaining.is_zero() || self.draining.has_begun() {
                return Ok(Popped::Rows(delivered));
            }
            let stopped = async {
                match stop {
                    Some(s) => s.notified().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = self.draining.begun() => return Ok(Popped::Rows(Vec::new())),
                () = stopped => return Ok(Popped::Rows(Vec::new())),
                _ = &mut woken => {}
                _ = tokio::time::sleep(WAIT_POLL.min(remaining)) => {}
                _ = cancel.notified() => {
                    return Err(SqlError::error(
                        SqlState::QUERY_CANCELED,
                        "canceling statement due to user request",
                    ));
                }
            }
        }
    }

    /// Committed messages of blocks whose queue is owned elsewhere: to
    /// their owner (or here, if this process owns the queue by now).
    /// Whatever cannot be delivered is dropped and logged, as a block's
    /// messages are when the database cannot say whether it committed.
    pub(super) async fn apply_leftovers(&self, leftovers: Vec<Leftover>) {
        for left in leftovers {
            let Some((tenant, queue)) = self.queue_of(left.ref_) else {
                continue;
            };
            let messages = &left.messages;
            let done = self
                .at_owner(
                    (tenant, left.ref_, &queue),
                    |o| {
                        apply(o, messages.clone());
                        Ok(())
                    },
                    || Op::Apply(messages.clone()),
                    |r| matches!(r, Reply::Done).then_some(()),
                )
                .await;
            if let Err(e) = done {
                tracing::warn!(queue = %queue, error = %e.message,
                    "committed ephemeral PUSHes could not be handed to the queue's owner: their messages are dropped");
            }
        }
    }

    /// A request another queenwire forwarded: run here if this process
    /// owns the queue, [`Reply::NotOwner`] (nothing done) if not.
    pub(super) async fn serve_request(
        &self,
        req: Request,
        cancel: &Notify,
        stop: &Notify,
    ) -> Reply {
        let queue = match self.queue_of(req.ref_) {
            Some((_, name)) => name,
            None => format!("#{}", req.ref_),
        };
        let tenant = req.tenant;
        if let Op::Counts = req.op {
            // Never elects: only an owner knows the counts.
            return match lock(&self.owned).get(&req.ref_).cloned() {
                Some(o) if o.valid() && o.tenant == tenant => {
                    let (messages, pending) = lock(&o.store).counts();
                    Reply::Seqs(vec![messages, pending])
                }
                _ => Reply::NotOwner,
            };
        }
        let owned = match req.op {
            Op::Pop { spec, wait } => {
                let at = (tenant, req.ref_, queue.as_str());
                return match self.pop(at, &spec, wait, (cancel, Some(stop)), false).await {
                    Ok(Popped::Rows(rows)) => Reply::Delivered(rows),
                    Ok(Popped::NotOwner) => Reply::NotOwner,
                    Err(e) if unelectable(&e) => Reply::NotOwner,
                    Err(e) => Reply::Error(e),
                };
            }
            ref op => match self.route(req.ref_, &queue).await {
                Ok(Route::Local(o)) => (o, op),
                Ok(Route::Remote(_)) => return Reply::NotOwner,
                // The queue is gone: ACK and RENEW answer as for a gone
                // queue's receipts.
                Err(e) if e.code() == SqlState::UNDEFINED_OBJECT.code() => {
                    return match op {
                        Op::Ack { items, .. } => {
                            Reply::Statuses(items.iter().map(|_| "stale".to_string()).collect())
                        }
                        Op::Renew { items, .. } => Reply::Until(vec![None; items.len()]),
                        _ => Reply::Error(e),
                    };
                }
                Err(e) if unelectable(&e) => return Reply::NotOwner,
                Err(e) => return Reply::Error(e),
            },
        };
        let (o, op) = owned;
        let result = match op {
            Op::Push(messages) => of_tenant(&o, tenant, &queue)
                .and_then(|o| push(o, messages.clone()))
                .map(Reply::Pushed),
            Op::Fit { count, bytes } => of_tenant(&o, tenant, &queue)
                .and_then(|o| fit(o, *count, *bytes))
                .map(|()| Reply::Done),
            Op::Apply(messages) => of_tenant(&o, tenant, &queue).map(|o| {
                apply(o, messages.clone());
                Reply::Done
            }),
            Op::Ack { failed, items } => Ok(Reply::Statuses(ack(&o, tenant, items, *failed))),
            Op::Renew { extend, items } => Ok(Reply::Until(renew(&o, tenant, items, *extend))),
            Op::Pop { .. } | Op::Counts => Ok(Reply::NotOwner),
        };
        result.unwrap_or_else(Reply::Error)
    }
}
