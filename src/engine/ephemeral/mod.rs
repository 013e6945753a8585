//! Ephemeral queues (seed 000's 030; docs/internals/ephemeral.md): the
//! declaration and quota in PostgreSQL, the messages only in the memory of
//! the one queenwire that owns the queue, lost when it stops.
//!
//! Ownership: one owner per queue, elected through 029's lease table (task
//! `ephemeral:<ref>`, [`LEASE_TTL`]). The first statement on a queue with
//! no live owner makes this process claim it; the owner renews its leases
//! every [`RENEW_EVERY`] and serves a queue only while its last renewal is
//! younger than the lease less a margin, so two processes never serve one
//! queue at once. When the owner dies its lease runs out and the next
//! statement through any queenwire elects a new owner, with an empty queue.
//! A queenwire that does not own the queue forwards its PUSH, POP, ACK and
//! RENEW to the owner over an authenticated channel (`wire.rs`, the owner's
//! side in `owner.rs`, the forwarding side in `forward.rs`) and answers with
//! the owner's rows and errors.
//!
//! Every lease write and commit check runs on this module's own connection
//! ([`run`]), in transactions of their own (029's rule), never on a client's.

mod codec;
mod exec;
mod forward;
mod ops;
mod owner;
mod show;
pub mod store;
mod wire;

pub use show::show_queues;

pub use forward::Internal;

use crate::backend::call::query;
use crate::backend::health::Health;
use crate::calls::ephemeral::{Claim, ClaimRow, CommitTake, Names};
use crate::protocol::{SqlError, SqlState};
use crate::shutdown::ShutdownSignal;
use forward::{peer, publish, Peer};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};
use store::{NewMessage, Quota, Store};
use tokio::sync::{mpsc, oneshot, Notify};
use uuid::Uuid;

/// How long an owner's lease runs without renewal.
pub const LEASE_TTL: Duration = Duration::from_secs(5);
/// How often the owner renews, and the names are re-read.
pub const RENEW_EVERY: Duration = Duration::from_secs(1);
/// How long a statement waits for an election before it fails (55000).
const CLAIM_TIMEOUT: Duration = Duration::from_secs(5);
/// An owner stops serving this long before its lease could run out.
const MARGIN: Duration = Duration::from_millis(1500);
/// How long a session waits for its block's forwarded PUSHes at its end.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the internal address is published again (rows not refreshed
/// for an hour are pruned).
const PUBLISH_EVERY: u32 = 600;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// A queue this process owns.
pub struct Owned {
    pub tenant: Uuid,
    pub queue: String,
    pub store: Mutex<Store>,
    /// Serve only before this instant (renewals push it on).
    valid_until: Mutex<Instant>,
    /// Woken by every PUSH applied (POP … WAIT).
    pub pushed: Notify,
}

impl Owned {
    fn valid(&self) -> bool {
        Instant::now() < *lock(&self.valid_until)
    }
}

/// What a claim found.
enum Claimed {
    Mine(Arc<Owned>),
    /// Another holder; `peer` where it takes forwarded statements (`None`
    /// when it published no address: a queenwire that cannot take them).
    Other {
        holder: String,
        peer: Option<Arc<Peer>>,
    },
    Gone,
}

/// Where a statement on an ephemeral queue runs.
enum Route {
    Local(Arc<Owned>),
    Remote(Arc<Peer>),
}

enum Request {
    Claim {
        ref_: i64,
        reply: oneshot::Sender<Result<Claimed, String>>,
    },
    /// Re-read the names now (after a CREATE QUEUE through this process).
    Refresh { reply: oneshot::Sender<()> },
    /// Where a holder takes forwarded statements.
    Peer {
        holder: String,
        reply: oneshot::Sender<Option<Arc<Peer>>>,
    },
    /// Transaction blocks ended: apply the PUSHes of those that committed;
    /// `reply` gets the committed ones of queues another process owns.
    Settle {
        tokens: Vec<Uuid>,
        reply: oneshot::Sender<Vec<Leftover>>,
    },
}

/// Messages of an ephemeral PUSH inside a transaction block, until COMMIT.
struct Pending {
    ref_: i64,
    messages: Vec<NewMessage>,
    /// The queue was owned elsewhere at the PUSH: the session waits for the
    /// forwarding before its client sees the block end.
    remote: bool,
}

/// Committed messages of a queue this process does not own: forwarded to
/// its owner. The queue counts as settling until this is dropped.
struct Leftover {
    ref_: i64,
    messages: Vec<NewMessage>,
    _settled: Settled,
}

pub struct Ephemeral {
    /// This process in the lease table: tells a client where the owner is.
    pub holder: String,
    /// (tenant, queue) → ref, of every ephemeral queue.
    names: Mutex<HashMap<(Uuid, String), i64>>,
    owned: Mutex<HashMap<i64, Arc<Owned>>>,
    pending: Mutex<HashMap<Uuid, Pending>>,
    /// Per queue, the ended transactions whose PUSHes are being settled: a
    /// POP waits for them, so a client that saw COMMIT (or a pipeline's
    /// Sync) return sees its messages.
    settling: Mutex<HashMap<i64, usize>>,
    settled: Notify,
    requests: mpsc::UnboundedSender<Request>,
    /// The owner of each queue owned elsewhere, as last found: used until
    /// forwarding to it fails or it says it is not the owner.
    remote: Mutex<HashMap<i64, Arc<Peer>>>,
    /// Other queenwires by holder name: address, secret, connections.
    peers: Mutex<HashMap<String, Arc<Peer>>>,
    /// Where this process takes forwarded statements, and its secret.
    internal: forward::Published,
    /// Begins when this process drains: waiting POPs return.
    draining: ShutdownSignal,
    /// The background task ([`run`]), awaited by [`Ephemeral::stopped`].
    running: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Ephemeral {
    /// Starts the registry, its background connection ([`run`], on
    /// `config`, until `shutdown` begins) and the internal listener that
    /// takes statements other queenwires forward (bound by
    /// [`Internal::bind`]); `listen`, the client address of this process,
    /// goes into its holder name.
    pub fn start(
        mut config: tokio_postgres::Config,
        listen: std::net::SocketAddr,
        internal: (tokio::net::TcpListener, String),
        shutdown: &crate::shutdown::Shutdown,
    ) -> Arc<Ephemeral> {
        // As the server's other background connections are named.
        config.application_name("queenwire background");
        let (listener, address) = internal;
        let (hub, requests) = Ephemeral::new(&listen.to_string(), address, shutdown.drain_signal());
        let running = tokio::spawn(run(config, hub.clone(), requests, shutdown.signal()));
        *lock(&hub.running) = Some(running);
        tokio::spawn(owner::serve(listener, hub.clone(), shutdown.signal()));
        hub
    }

    /// `listen`: the client address of this process, in its holder name;
    /// `internal`: the address other queenwires forward to.
    fn new(listen: &str, internal: String, draining: ShutdownSignal) -> (Arc<Ephemeral>, Receiver) {
        let (tx, rx) = mpsc::unbounded_channel();
        (
            Arc::new(Ephemeral {
                holder: format!(
                    "queenwire at {listen} (pid {}, {})",
                    std::process::id(),
                    Uuid::now_v7()
                ),
                names: Mutex::new(HashMap::new()),
                owned: Mutex::new(HashMap::new()),
                pending: Mutex::new(HashMap::new()),
                settling: Mutex::new(HashMap::new()),
                settled: Notify::new(),
                requests: tx,
                remote: Mutex::new(HashMap::new()),
                peers: Mutex::new(HashMap::new()),
                internal: forward::Published::new(internal),
                draining,
                running: Mutex::new(None),
            }),
            Receiver(rx),
        )
    }

    /// The ref of an ephemeral queue of the tenant, `None` for any other.
    pub fn ref_of(&self, tenant: Uuid, queue: &str) -> Option<i64> {
        lock(&self.names).get(&(tenant, queue.to_string())).copied()
    }

    /// The tenant and name of the queue with this ref, as far as this
    /// process knows it.
    pub fn queue_of(&self, ref_: i64) -> Option<(Uuid, String)> {
        lock(&self.names)
            .iter()
            .find(|(_, r)| **r == ref_)
            .map(|(key, _)| key.clone())
    }

    /// Where the queue lives: this process's store when it owns the queue
    /// (claiming it when no one does), else the owner to forward to;
    /// `55006` naming the owner when that one takes no forwarded statements.
    async fn route(&self, ref_: i64, queue: &str) -> Result<Route, SqlError> {
        if let Some(o) = lock(&self.owned).get(&ref_).cloned() {
            if o.valid() {
                return Ok(Route::Local(o));
            }
        }
        if let Some(peer) = lock(&self.remote).get(&ref_).cloned() {
            return Ok(Route::Remote(peer));
        }
        let (reply, answer) = oneshot::channel();
        let unavailable = |why: String| {
            SqlError::error(
                SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
                format!("ephemeral queue \"{queue}\": its owner cannot be elected now ({why})"),
            )
        };
        self.requests
            .send(Request::Claim { ref_, reply })
            .map_err(|_| unavailable("queenwire is shutting down".into()))?;
        // Bounded: a database that does not answer must not hold the
        // statement for a TCP timeout.
        let answer = tokio::time::timeout(CLAIM_TIMEOUT, answer)
            .await
            .map_err(|_| unavailable("the database did not answer in time".into()))?;
        match answer {
            Ok(Ok(Claimed::Mine(o))) => {
                lock(&self.remote).remove(&ref_);
                Ok(Route::Local(o))
            }
            Ok(Ok(Claimed::Other {
                peer: Some(peer), ..
            })) => {
                lock(&self.remote).insert(ref_, peer.clone());
                Ok(Route::Remote(peer))
            }
            Ok(Ok(Claimed::Other { holder, peer: None })) => Err(SqlError::error(
                SqlState::OBJECT_IN_USE,
                format!(
                    "ephemeral queue \"{queue}\" is owned by another queenwire ({holder}), \
                     which takes no forwarded statements: connect to that queenwire"
                ),
            )),
            Ok(Ok(Claimed::Gone)) => Err(SqlError::error(
                SqlState::UNDEFINED_OBJECT,
                format!("queue \"{queue}\" does not exist"),
            )),
            Ok(Err(why)) => Err(unavailable(why)),
            Err(_) => Err(unavailable("queenwire is shutting down".into())),
        }
    }

    /// Where `holder` takes forwarded statements (a bounded wait for a
    /// database read the first time).
    async fn peer_of(&self, holder: &str) -> Option<Arc<Peer>> {
        if let Some(p) = lock(&self.peers).get(holder).cloned() {
            return Some(p);
        }
        let (reply, answer) = oneshot::channel();
        let holder = holder.to_string();
        self.requests.send(Request::Peer { holder, reply }).ok()?;
        tokio::time::timeout(CLAIM_TIMEOUT, answer)
            .await
            .ok()?
            .ok()?
    }

    /// Once shutdown has begun: waits until the queues this process owned
    /// are handed over (their leases ended, bounded).
    pub async fn stopped(&self) {
        let running = lock(&self.running).take();
        if let Some(task) = running {
            let _ = task.await;
        }
    }

    /// Re-reads the names of the ephemeral queues (waits for it).
    pub async fn refresh(&self) {
        let (reply, done) = oneshot::channel();
        if self.requests.send(Request::Refresh { reply }).is_ok() {
            let _ = done.await;
        }
    }

    /// Transaction blocks of a session ended (committed or not): their
    /// ephemeral PUSHes are applied if they committed, else dropped. Those
    /// of queues owned elsewhere are forwarded to the owner; when a PUSH
    /// was forwarded already at the PUSH, this returns only once that is
    /// done (bounded), so the client sees its block end after the messages
    /// are there.
    pub async fn transaction_ended(self: &Arc<Self>, tokens: Vec<Uuid>) {
        if tokens.is_empty() {
            return;
        }
        let mut remote = false;
        {
            let pending = lock(&self.pending);
            let mut settling = lock(&self.settling);
            for t in &tokens {
                if let Some(p) = pending.get(t) {
                    *settling.entry(p.ref_).or_default() += 1;
                    remote |= p.remote;
                }
            }
        }
        let (reply, leftovers) = oneshot::channel();
        if let Err(mpsc::error::SendError(Request::Settle { tokens, .. })) =
            self.requests.send(Request::Settle { tokens, reply })
        {
            drop(self.settle(&[], &tokens));
            return;
        }
        let hub = self.clone();
        let forwarding = tokio::spawn(async move {
            if let Ok(leftovers) = leftovers.await {
                hub.apply_leftovers(leftovers).await;
            }
        });
        if remote {
            let _ = tokio::time::timeout(SETTLE_TIMEOUT, forwarding).await;
        }
    }

    /// Waits (a bounded while) until the PUSHes of transactions that ended
    /// before now are applied to the queue, or dropped.
    async fn settled_for(&self, ref_: i64) {
        let deadline = Instant::now() + CLAIM_TIMEOUT;
        loop {
            let done = self.settled.notified();
            tokio::pin!(done);
            done.as_mut().enable();
            if lock(&self.settling).get(&ref_).copied().unwrap_or(0) == 0 {
                return;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || tokio::time::timeout(left, done).await.is_err() {
                return;
            }
        }
    }

    /// (messages, pending) of a queue this process owns.
    pub fn counts(&self, ref_: i64) -> Option<(i64, i64)> {
        let o = lock(&self.owned).get(&ref_).cloned()?;
        let counts = lock(&o.store).counts();
        Some(counts)
    }

    fn claimed(&self, ref_: i64, row: ClaimRow, asked: Instant) -> Claimed {
        if row.holder != self.holder {
            if lock(&self.owned).remove(&ref_).is_some() {
                tracing::warn!(queue = %row.queue_name, holder = %row.holder,
                    "lost the ownership of an ephemeral queue: its messages here are dropped");
            }
            return Claimed::Other {
                holder: row.holder,
                peer: None,
            };
        }
        let quota = Quota {
            max_length: row.max_length.and_then(|v| u64::try_from(v).ok()),
            max_bytes: row.max_bytes.and_then(|v| u64::try_from(v).ok()),
            ttl: (row.ttl_ms > 0).then(|| Duration::from_millis(row.ttl_ms as u64)),
            drop_oldest: row.overflow == "drop_oldest",
            lease_time: Duration::from_secs(u64::try_from(row.lease_time).unwrap_or(60).max(1)),
            retry_limit: row.retry_limit,
            retry_delay: Duration::from_millis(u64::try_from(row.retry_delay).unwrap_or(0)),
            delayed_processing: Duration::from_secs(
                u64::try_from(row.delayed_processing).unwrap_or(0),
            ),
            window_buffer: Duration::from_secs(u64::try_from(row.window_buffer).unwrap_or(0)),
            dedup_window: Duration::from_secs(u64::try_from(row.dedup_window).unwrap_or(0)),
        };
        let until = asked + LEASE_TTL - MARGIN;
        let mut owned = lock(&self.owned);
        let o = owned.entry(ref_).or_insert_with(|| {
            Arc::new(Owned {
                tenant: row.tenant_id,
                queue: row.queue_name.clone(),
                store: Mutex::new(Store::new(quota.clone())),
                valid_until: Mutex::new(until),
                pushed: Notify::new(),
            })
        });
        *lock(&o.valid_until) = until;
        lock(&o.store).quota = quota;
        Claimed::Mine(o.clone())
    }

    /// Applies the PUSHes of `committed` among `tokens` to the queues this
    /// process owns, drops the uncommitted; returns the committed ones of
    /// queues owned elsewhere.
    fn settle(self: &Arc<Self>, committed: &[Uuid], tokens: &[Uuid]) -> Vec<Leftover> {
        let mut leftovers = Vec::new();
        for token in tokens {
            let Some(p) = lock(&self.pending).remove(token) else {
                continue;
            };
            let done = Settled {
                hub: self.clone(),
                ref_: p.ref_,
            };
            if !committed.contains(token) {
                continue;
            }
            match lock(&self.owned).get(&p.ref_).cloned() {
                Some(o) if o.valid() => ops::apply(&o, p.messages),
                _ => leftovers.push(Leftover {
                    ref_: p.ref_,
                    messages: p.messages,
                    _settled: done,
                }),
            }
        }
        leftovers
    }
}

/// Counts one settled transaction of a queue down, however its settling
/// ended.
struct Settled {
    hub: Arc<Ephemeral>,
    ref_: i64,
}

impl Drop for Settled {
    fn drop(&mut self) {
        let mut settling = lock(&self.hub.settling);
        if let Some(n) = settling.get_mut(&self.ref_) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                settling.remove(&self.ref_);
            }
        }
        drop(settling);
        self.hub.settled.notify_waiters();
    }
}

/// The requests [`run`] serves.
pub struct Receiver(mpsc::UnboundedReceiver<Request>);

/// The ephemeral queues' own connection: claims, renewals, names, commit
/// checks, until shutdown begins. Reconnects after a lost connection.
pub async fn run(
    config: tokio_postgres::Config,
    hub: Arc<Ephemeral>,
    requests: Receiver,
    shutdown: ShutdownSignal,
) {
    tokio::select! {
        () = serve(config.clone(), hub.clone(), requests.0) => {}
        () = shutdown.begun() => {}
    }
    forward::release(&config, &hub).await;
}

async fn serve(
    config: tokio_postgres::Config,
    hub: Arc<Ephemeral>,
    mut requests: mpsc::UnboundedReceiver<Request>,
) {
    let mut health = Health::new("ephemeral queues");
    loop {
        let client = match config.connect(tokio_postgres::NoTls).await {
            Ok((client, connection)) => {
                tokio::spawn(async move {
                    let _ = connection.await;
                });
                client
            }
            Err(e) => {
                health.lost(&e);
                fail_waiting(&hub, &mut requests, &e.to_string());
                tokio::time::sleep(RENEW_EVERY).await;
                continue;
            }
        };
        if let Err(e) = publish(&client, &hub).await {
            health.lost(&e);
            fail_waiting(&hub, &mut requests, &e.to_string());
            tokio::time::sleep(RENEW_EVERY).await;
            continue;
        }
        health.ok();
        let mut tick = tokio::time::interval(RENEW_EVERY);
        let mut ticks = 0u32;
        loop {
            let step = tokio::select! {
                request = requests.recv() => match request {
                    Some(r) => serve_one(&client, &hub, r).await,
                    None => return,
                },
                _ = tick.tick() => {
                    ticks = ticks.wrapping_add(1);
                    match ticks % PUBLISH_EVERY {
                        0 => publish(&client, &hub).await,
                        _ => Ok(()),
                    }
                    .and(renew(&client, &hub).await)
                }
            };
            if let Err(e) = step {
                health.lost(&e);
                break;
            }
        }
    }
}

fn fail_waiting(hub: &Arc<Ephemeral>, requests: &mut mpsc::UnboundedReceiver<Request>, why: &str) {
    while let Ok(r) = requests.try_recv() {
        match r {
            Request::Claim { reply, .. } => {
                let _ = reply.send(Err(why.to_string()));
            }
            Request::Refresh { reply } => {
                let _ = reply.send(());
            }
            Request::Peer { reply, .. } => {
                let _ = reply.send(None);
            }
            Request::Settle { tokens, reply } => {
                tracing::warn!(why, "cannot tell whether transactions with ephemeral PUSHes committed: their messages are dropped");
                let _ = reply.send(hub.settle(&[], &tokens));
            }
        }
    }
}

type Step = Result<(), crate::backend::call::ClientCallError>;

async fn serve_one(
    client: &tokio_postgres::Client,
    hub: &Arc<Ephemeral>,
    request: Request,
) -> Step {
    match request {
        Request::Claim { ref_, reply } => {
            let asked = Instant::now();
            match claim(client, hub, ref_).await {
                Ok(rows) => {
                    let claimed = match rows.into_iter().next() {
                        Some(row) => hub.claimed(ref_, row, asked),
                        None => Claimed::Gone,
                    };
                    let claimed = match claimed {
                        Claimed::Other { holder, .. } => match peer(client, hub, &holder).await {
                            Ok(peer) => Claimed::Other { holder, peer },
                            Err(e) => {
                                let _ = reply.send(Err(e.to_string()));
                                return Err(e);
                            }
                        },
                        other => other,
                    };
                    let _ = reply.send(Ok(claimed));
                }
                Err(e) => {
                    let _ = reply.send(Err(e.to_string()));
                    return Err(e);
                }
            }
        }
        Request::Refresh { reply } => {
            let result = read_names(client, hub).await;
            let _ = reply.send(());
            result?;
        }
        Request::Peer { holder, reply } => {
            let found = peer(client, hub, &holder).await;
            let _ = reply.send(found.as_ref().ok().cloned().flatten());
            found?;
        }
        Request::Settle { tokens, reply } => {
            match query(client, &CommitTake { tokens: &tokens }).await {
                Ok(rows) => {
                    let committed: Vec<Uuid> = rows.into_iter().map(|c| c.token).collect();
                    let _ = reply.send(hub.settle(&committed, &tokens));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot tell whether transactions with ephemeral PUSHes committed: their messages are dropped");
                    let _ = reply.send(hub.settle(&[], &tokens));
                    return Err(e);
                }
            }
        }
    }
    Ok(())
}

async fn claim(
    client: &tokio_postgres::Client,
    hub: &Ephemeral,
    ref_: i64,
) -> Result<Vec<ClaimRow>, crate::backend::call::ClientCallError> {
    query(
        client,
        &Claim {
            ref_,
            holder: &hub.holder,
            ttl_ms: LEASE_TTL.as_millis() as i64,
        },
    )
    .await
}

async fn read_names(client: &tokio_postgres::Client, hub: &Ephemeral) -> Step {
    let rows = query(client, &Names).await?;
    let names: HashMap<(Uuid, String), i64> = rows
        .into_iter()
        .map(|r| ((r.tenant_id, r.queue_name), r.ref_))
        .collect();
    let live: Vec<i64> = names.values().copied().collect();
    *lock(&hub.names) = names;
    // A dropped queue's messages go with it.
    lock(&hub.owned).retain(|r, _| live.contains(r));
    Ok(())
}

/// Every tick: the names again, and each owned queue's lease renewed.
async fn renew(client: &tokio_postgres::Client, hub: &Ephemeral) -> Step {
    read_names(client, hub).await?;
    let refs: Vec<i64> = lock(&hub.owned).keys().copied().collect();
    for ref_ in refs {
        let asked = Instant::now();
        match claim(client, hub, ref_).await?.into_iter().next() {
            Some(row) => {
                hub.claimed(ref_, row, asked);
            }
            None => {
                lock(&hub.owned).remove(&ref_);
            }
        }
    }
    Ok(())
}

/// The wall clock of a lease expiry in rows.
fn wall() -> SystemTime {
    SystemTime::now()
}
