//! Fusion: statements of different sessions that arrive while a write of
//! their kind is in flight are written together, by the next write, in one
//! call and one transaction — one commit (and one WAL flush) for many
//! statements.
//!
//! - PUSH (`push.rs`): per tenant, the statements' rows for one (queue,
//!   partition) become one segment of one `log_push_many_v1` call (a
//!   statement's 16 or more rows for a partition, compressed by its
//!   session, one of their own), whatever the statements' queues;
//! - ACK (`ack.rs`): per tenant, the receipts of plain ACKs (not FAILED)
//!   go in one `log_ack_v1` call;
//! - POP (`pop.rs`): per (tenant, queue, group, options), POPs of one
//!   partition each go in one `log_pop_v2` call that claims a partition
//!   for each of them (POPs of 16 messages or more: two lanes, split by
//!   session, so two such calls may be in flight).
//!
//! A lone statement is written at once (it leads its own write), so fusion
//! costs it nothing; statements queue only behind a write already in
//! flight, or, for at most 500 µs, while the write waits for sessions it
//! has just answered that usually come straight back (`lane.rs`). Only statements outside a transaction block are fused (inside
//! one, a statement belongs to the client's transaction). If a fused write
//! fails, it is rolled back and each statement is written again alone, so
//! one statement's failure never fails another's. If its connection is
//! lost, every statement of the write shares the outcome: 08007 when the
//! commit may have happened.

mod ack;
mod hold;
mod lane;
mod pop;
mod push;

pub use pop::fusable as pop_fusable;

use lane::Lanes;

use super::queues::Placed;
use super::sealing::Sealing;
use super::wake::Announcer;
use super::ExecError;
use crate::backend::{BackendError, Pool};
use crate::engine::receipt::Receipt;
use crate::protocol::{SqlError, SqlState};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;
use tokio::task;
use uuid::Uuid;

/// At most this many statements share one write: bounds the size of one
/// call and the time a statement waits for its batch-mates.
const MAX_FUSED_STATEMENTS: usize = 256;

pub struct Fuser {
    pool: Pool,
    announcer: Announcer,
    sealing: Arc<Sealing>,
    /// The partition ids fused pushes were answered with.
    placed: Placed,
    /// Per tenant; and per (tenant, queue) for the queues set aside
    /// (`push.rs`).
    pushes: Lanes<Uuid, push::Job>,
    queue_pushes: Lanes<(Uuid, String), push::Job>,
    aside: Mutex<HashSet<(Uuid, String)>>,
    acks: Lanes<Uuid, ack::Job>,
    pops: Lanes<pop::Key, pop::Job>,
    /// Per session (its task): the lane of its last fused POP, and when.
    popped: Mutex<HashMap<task::Id, (Arc<pop::Via>, Instant)>>,
    /// Per session: the claim held for its next POP (`hold.rs`).
    held: Mutex<HashMap<task::Id, hold::Held>>,
    /// Per (tenant, queue): when its groups' held claims were last given
    /// back for a SEEK, a type change or a drop (`hold.rs`).
    resets: Mutex<HashMap<(Uuid, String), Instant>>,
}

/// A session's ACK goes to the lane of its last fused POP when that POP
/// was this recent.
const POPPED_FOR: Duration = Duration::from_secs(1);

impl Fuser {
    pub fn new(pool: Pool, announcer: Announcer, sealing: Arc<Sealing>) -> Fuser {
        Fuser {
            pool,
            announcer,
            sealing,
            placed: Placed::default(),
            pushes: Lanes::default(),
            queue_pushes: Lanes::default(),
            aside: Mutex::new(HashSet::new()),
            acks: Lanes::default(),
            pops: Lanes::with_linger(pop::LINGER),
            popped: Mutex::new(HashMap::new()),
            held: Mutex::new(HashMap::new()),
            resets: Mutex::new(HashMap::new()),
        }
    }

    /// The lane of a POP of this session's with `key` (the one its last
    /// POP used when the key is the same), remembered for its ACK.
    fn popped_via(&self, key: pop::Key, make: impl FnOnce(pop::Key) -> pop::Via) -> Arc<pop::Via> {
        let now = Instant::now();
        let Some(session) = task::try_id() else {
            return Arc::new(make(key));
        };
        let mut popped = lock(&self.popped);
        if let Some((via, at)) = popped.get_mut(&session) {
            if via.key == key {
                *at = now;
                return via.clone();
            }
        }
        // Sessions end without saying so.
        if popped.len() > 256 {
            popped.retain(|_, (_, at)| now.duration_since(*at) < POPPED_FOR);
        }
        let via = Arc::new(make(key));
        popped.insert(session, (via.clone(), now));
        via
    }

    /// The lane of this session's last fused POP, when recent and of this
    /// tenant.
    fn last_pop_lane(&self, tenant: Uuid) -> Option<Arc<pop::Via>> {
        let session = task::try_id()?;
        let popped = lock(&self.popped);
        let (via, at) = popped.get(&session)?;
        (via.key.tenant == tenant && at.elapsed() < POPPED_FOR).then(|| via.clone())
    }
}

/// A statement waiting for its write, and where its result goes.
struct Job<T, R> {
    statement: T,
    reply: oneshot::Sender<Result<R, ExecError>>,
}

/// A plain ACK's receipts waiting for their write, and where their
/// statuses go.
type AckJob = Job<Vec<Receipt>, Vec<String>>;

/// The ACKs of one write: their receipts end to end, and each statement's
/// count of them and its reply.
struct Batch {
    receipts: Vec<Receipt>,
    sizes: Vec<usize>,
    replies: Vec<oneshot::Sender<Result<Vec<String>, ExecError>>>,
}

impl Batch {
    fn of(jobs: Vec<AckJob>) -> Batch {
        let mut batch = Batch {
            receipts: Vec::new(),
            sizes: Vec::with_capacity(jobs.len()),
            replies: Vec::with_capacity(jobs.len()),
        };
        for job in jobs {
            batch.sizes.push(job.statement.len());
            batch.receipts.extend(job.statement);
            batch.replies.push(job.reply);
        }
        batch
    }

    /// Each statement its receipts' statuses (once they are committed).
    fn answer(self, status: Vec<String>) {
        let mut status = status.into_iter();
        for (n, reply) in self.sizes.into_iter().zip(self.replies) {
            let _ = reply.send(Ok(status.by_ref().take(n).collect()));
        }
    }

    fn fail(self, unknown: bool, why: &str) {
        fail_all(self.replies, unknown, why);
    }

    fn unavailable(self, e: &BackendError) {
        unavailable(self.replies, e);
    }
}

/// Waits for a queued statement's result; a writer that stopped may have
/// been mid-write.
async fn outcome<R>(rx: oneshot::Receiver<Result<R, ExecError>>) -> Result<R, ExecError> {
    rx.await
        .unwrap_or_else(|_| Err(lost(true, "the fused writer stopped")))
}

/// Fails every statement of a write; `unknown`: it may have committed.
fn fail_all<R>(
    replies: impl IntoIterator<Item = oneshot::Sender<Result<R, ExecError>>>,
    unknown: bool,
    why: &str,
) {
    for reply in replies {
        let _ = reply.send(Err(lost(unknown, why)));
    }
}

/// Every statement of a write whose connection could not be had.
fn unavailable<R>(
    replies: impl IntoIterator<Item = oneshot::Sender<Result<R, ExecError>>>,
    e: &BackendError,
) {
    let why = e.to_string();
    for reply in replies {
        let _ = reply.send(Err(ExecError::Lost(BackendError::Protocol(why.clone()))));
    }
}

/// A fused statement's error as its session reports it: a lost connection
/// was the fuser's, not the session's, so the session goes on and its
/// client is told 08007 (the call may have committed) or 08006.
pub fn as_session_error(e: ExecError) -> ExecError {
    let ExecError::Lost(e) = e else {
        return e;
    };
    ExecError::Refused(match e.cause() {
        _ if e.outcome_unknown() => SqlError::error(
            SqlState::TRANSACTION_RESOLUTION_UNKNOWN,
            format!(
                "the backend connection broke before the reply: the outcome of the statement \
                 is unknown (it may have been committed); {}",
                e.cause()
            ),
        ),
        BackendError::Server(fields) => fields.clone(),
        other => SqlError::error(
            SqlState::CONNECTION_FAILURE,
            format!("backend unavailable: {other}"),
        ),
    })
}

fn lost(unknown: bool, why: &str) -> ExecError {
    let cause = BackendError::Protocol(why.to_string());
    ExecError::Lost(if unknown {
        BackendError::OutcomeUnknown(Box::new(cause))
    } else {
        cause
    })
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(l) => l,
        Err(p) => p.into_inner(),
    }
}
