//! Held claims: a consumer that pops and acks in a loop sends its ACK to
//! its POP's lane (`ack.rs`), and the write that carries the ACK also
//! claims for that session's next POP. The claim is held here for the
//! session; its next POP of the same shape, if it comes within
//! [`HOLD_FOR`], is answered from it without a write of its own. So such a
//! consumer costs one write a message instead of two.
//!
//! A held claim is leased like any other (per (partition, group) one lease
//! at a time), delivered to one session at most, and what its session
//! does not take in time is given back (`log_unclaim_v1`: its lease
//! released, no failure counted), by the session when it sends another
//! POP, else by a task of the write that made it. Only leased claims are
//! held (never AUTO ACK's, whose cursor moves at the claim), and only for
//! leases long enough that the hold is a small part of them.

use super::{lock, pop, Fuser};
use crate::backend::call::{CallEnd, Calls};
use crate::backend::pool;
use crate::backend::BackendError;
use crate::calls::queues::{Unclaim, UnclaimShared};
use crate::engine::receipt::ReceiptKey;
use crate::engine::values::Cell;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task;
use uuid::Uuid;

/// How long a held claim waits for its session's next POP.
pub(super) const HOLD_FOR: Duration = Duration::from_millis(100);

/// Tries to give a claim back on a lost connection before its lease is
/// left to expire.
const GIVE_BACK_ATTEMPTS: usize = 3;

/// A claim held for a session: its rows as its POP would return them, and
/// what gives it back.
pub(super) struct Held {
    key: pop::Key,
    rows: Vec<Vec<Cell>>,
    at: Instant,
    partition_id: i64,
    lease_token: Uuid,
    /// The claim's offsets, first to last (one partition's, contiguous for
    /// an ordered group).
    offsets: (i64, i64),
    /// A shared group's claim: given back by its token alone.
    shared: bool,
}

impl Fuser {
    /// Holds `rows` (one partition's claim, made at `at` by a write that
    /// began at `began`) for `session`; a claim held for it before is given
    /// back, by a task of its own (not in the lane's write). Rows without a
    /// receipt (none are: only leased claims are held) are not held, nor a
    /// claim whose write began before its queue's groups were last reset
    /// (`give_back_group`: a SEEK, a type change or a drop ran meanwhile,
    /// so the claim may predate it): that one is given back.
    pub(super) fn hold(
        self: &Arc<Self>,
        session: task::Id,
        key: &pop::Key,
        receipts: &ReceiptKey,
        rows: Vec<Vec<Cell>>,
        at: Instant,
        began: Instant,
    ) {
        let Some(first) = rows.first() else { return };
        let Some(receipt) = first
            .first()
            .and_then(Cell::as_text)
            .and_then(|r| receipts.decode(r).ok())
        else {
            return;
        };
        // A shared group's claim need not be contiguous: its lowest and
        // highest offsets (the rows' fifth column).
        let offsets = rows.iter().filter_map(|row| match row.get(4) {
            Some(Cell::Int8(offset)) => Some(*offset),
            _ => None,
        });
        let first = offsets.clone().min().unwrap_or(receipt.offset);
        let last = offsets
            .max()
            .unwrap_or(receipt.offset + rows.len() as i64 - 1);
        let held = Held {
            key: key.clone(),
            rows,
            at,
            partition_id: receipt.partition_id,
            lease_token: receipt.lease_token,
            offsets: (first, last),
            shared: receipt.shared,
        };
        let reset = lock(&self.resets)
            .get(&(key.tenant, key.queue().to_string()))
            .is_some_and(|&reset| reset >= began);
        if reset {
            let fuser = self.clone();
            tokio::spawn(async move { fuser.give_back(held).await });
            return;
        }
        let replaced = lock(&self.held).insert(session, held);
        if let Some(old) = replaced {
            let fuser = self.clone();
            tokio::spawn(async move { fuser.give_back(old).await });
        }
    }

    /// The claim held for this session, if its POP of `key` may have it;
    /// a held claim it may not have is given back first.
    pub(super) async fn take_held(&self, key: &pop::Key) -> Option<Vec<Vec<Cell>>> {
        let session = task::try_id()?;
        let held = lock(&self.held).remove(&session)?;
        if held.key == *key && held.at.elapsed() < HOLD_FOR {
            return Some(held.rows);
        }
        self.give_back(held).await;
        None
    }

    /// Gives back the claim held for this session, if any: its POP is one
    /// that may not have it (inside a transaction block, of several
    /// partitions, of a namespace), which must not find the partition
    /// leased to its own session.
    pub async fn release_held(&self) {
        let Some(session) = task::try_id() else {
            return;
        };
        let held = lock(&self.held).remove(&session);
        if let Some(held) = held {
            self.give_back(held).await;
        }
    }

    /// Gives back every claim held here for a session of `group` (every
    /// group: `None`) on `queue` (of `tenant`), whichever session it waits
    /// for: a change of a group's type must not find the group's messages
    /// held for a consumer that is not there. Claims held by another
    /// queenwire are given back by it within [`HOLD_FOR`].
    pub async fn give_back_group(&self, tenant: Uuid, queue: &str, group: Option<&str>) {
        // A claim whose write is in flight now is not held when it ends.
        lock(&self.resets).insert((tenant, queue.to_string()), Instant::now());
        let of_group: Vec<Held> = lock(&self.held)
            .extract_if(|_, h| {
                h.key.tenant == tenant
                    && h.key.queue() == queue
                    && group.is_none_or(|g| h.key.group() == g)
            })
            .map(|(_, held)| held)
            .collect();
        for held in of_group {
            self.give_back(held).await;
        }
    }

    /// Gives back every claim still held (the sessions are gone: a stop),
    /// so that a stop leaves no lease to expire.
    pub async fn give_back_all(&self) {
        let all: Vec<Held> = lock(&self.held).drain().map(|(_, h)| h).collect();
        for held in all {
            self.give_back(held).await;
        }
    }

    /// Gives back what `sessions` did not take of the claims held for them
    /// at `at`, once [`HOLD_FOR`] has passed.
    pub(super) fn give_back_later(self: &Arc<Self>, sessions: Vec<task::Id>, at: Instant) {
        let fuser = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(HOLD_FOR).await;
            for session in sessions {
                let held = {
                    let mut map = lock(&fuser.held);
                    match map.get(&session) {
                        Some(h) if h.at == at => map.remove(&session),
                        _ => None,
                    }
                };
                if let Some(held) = held {
                    fuser.give_back(held).await;
                }
            }
        });
    }

    /// Releases a held claim's lease (no failure counted) and tells the
    /// hot list its partition has messages again. A connection lost on the
    /// way is retried on another (releasing a lease twice changes nothing:
    /// the token must still hold it); a give-back that cannot be made
    /// leaves the lease to expire, as a crash would.
    async fn give_back(&self, held: Held) {
        let group = held.key.group().to_string();
        let call = Unclaim {
            partition_ids: vec![held.partition_id],
            group: &group,
            lease_tokens: vec![Some(held.lease_token)],
            from_offsets: vec![held.offsets.0],
            to_offsets: vec![held.offsets.1],
            tenant: held.key.tenant,
        };
        let shared = UnclaimShared {
            partition_ids: vec![held.partition_id],
            group: &group,
            lease_tokens: vec![held.lease_token],
            from_offsets: vec![held.offsets.0],
            to_offsets: vec![held.offsets.1],
            tenant: held.key.tenant,
        };
        for attempt in 0..GIVE_BACK_ATTEMPTS {
            if attempt > 0 {
                tokio::time::sleep(HOLD_FOR).await;
            }
            let Ok(mut conn) = pool::checkout(&self.pool).await else {
                continue;
            };
            let calls = &mut Calls::new(&mut conn, CallEnd::Sync);
            let result = if held.shared {
                calls.run(&shared).await.map(drop)
            } else {
                calls.run(&call).await.map(drop)
            };
            pool::release(conn);
            match result {
                Ok(_) => {
                    // The partition's held messages are there again, and
                    // its turn in the rotation was not used.
                    self.announcer
                        .waiters
                        .hot
                        .given_back(&[(held.partition_id, group.as_str())]);
                    // Another consumer may be waiting for them (an ordered
                    // group's partition is handed over here).
                    self.announcer.released(&crate::engine::wake::queue_key(
                        held.key.tenant,
                        held.key.queue(),
                    ));
                    return;
                }
                // PostgreSQL refused it (the queue was dropped, say):
                // nothing to give back.
                Err(BackendError::Server(_)) => return,
                Err(_) => continue,
            }
        }
    }
}
