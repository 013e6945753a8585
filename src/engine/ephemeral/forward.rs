//! The forwarding side of the internal channel (`wire.rs`): a queenwire
//! that does not own an ephemeral queue sends the statement's typed
//! operation to the owner it found through the lease (and the owner's
//! published address and secret) and answers with the owner's reply.
//!
//! Per owner a few pooled connections, each authenticated once; a request
//! takes one for itself (a POP … WAIT holds it while it waits), so requests
//! never queue behind each other. Retry rule: a request that was never
//! sent whole (no connection, the handshake failed, the write failed) or
//! that the owner answered with "not the owner" did nothing, so the owner
//! is looked up again and the request goes again, for at most
//! [`REROUTE_FOR`] (long enough for a dead owner's lease to run out and a
//! new owner to be elected). A request sent whole whose reply is lost may
//! have taken effect: `08007`, never retried.

use super::wire::{self, Inbound, Op, Reply, Request};
use super::{lock, Ephemeral, Route, Step, LEASE_TTL};
use crate::backend::call::query;
use crate::calls::ephemeral::{Peer as PeerCall, PeerPublish};
use crate::protocol::{SqlError, SqlState};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use uuid::Uuid;

/// A new connection's TCP connect and handshake, at most.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// A reply, at most (beyond a POP's WAIT).
const REPLY_TIMEOUT: Duration = Duration::from_secs(30);
/// Idle connections kept per owner.
const IDLE_KEPT: usize = 32;
/// How long a request is re-routed while the owner is unreachable or says
/// it no longer owns the queue.
pub(super) const REROUTE_FOR: Duration = Duration::from_millis(LEASE_TTL.as_millis() as u64 + 3000);
/// Between two attempts.
const REROUTE_PAUSE: Duration = Duration::from_millis(200);

/// Where the internal channel listens (`--internal-listen`) and the address
/// other queenwires are told to reach it at (`--internal-advertise`).
#[derive(Debug, Clone, Default)]
pub struct Internal {
    /// `None`: the client listener's IP address, a port the system picks.
    pub listen: Option<String>,
    /// `None`: the address bound (127.0.0.1 when it is bound to every
    /// interface: then other hosts need this set).
    pub advertise: Option<String>,
}

impl Internal {
    /// Binds the internal listener; returns it with the address to publish.
    pub async fn bind(&self, client: SocketAddr) -> std::io::Result<(TcpListener, String)> {
        let listener = match &self.listen {
            Some(addr) => TcpListener::bind(addr.as_str()).await?,
            None => TcpListener::bind(SocketAddr::new(client.ip(), 0)).await?,
        };
        let bound = listener.local_addr()?;
        let advertise = match &self.advertise {
            Some(a) => a.clone(),
            None if bound.ip().is_unspecified() => {
                tracing::warn!(%bound, "the internal channel listens on every interface: other hosts' queenwires reach it only with --internal-advertise; published as 127.0.0.1");
                SocketAddr::new(std::net::Ipv4Addr::LOCALHOST.into(), bound.port()).to_string()
            }
            None => bound.to_string(),
        };
        Ok((listener, advertise))
    }
}

impl std::fmt::Display for Internal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.listen {
            Some(addr) => write!(f, "{addr} (--internal-listen)"),
            None => write!(f, "the internal port (--internal-listen)"),
        }
    }
}

/// This process's published address and secret.
pub(super) struct Published {
    pub address: String,
    secret: [u8; 32],
}

impl Published {
    pub fn new(address: String) -> Published {
        Published {
            address,
            secret: rand::random(),
        }
    }

    pub fn secret(&self) -> &[u8] {
        &self.secret
    }
}

struct Conn {
    rd: OwnedReadHalf,
    wr: OwnedWriteHalf,
}

impl Conn {
    /// Still open, with nothing unread: an idle connection whose owner
    /// closed it (stopped, killed) reads end-of-file at once.
    fn alive(&self) -> bool {
        let mut b = [0u8; 1];
        matches!(self.rd.try_read(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
    }
}

/// Another queenwire, as its published row says.
pub(super) struct Peer {
    pub holder: String,
    pub address: String,
    secret: Vec<u8>,
    idle: Mutex<Vec<Conn>>,
    next_id: AtomicU64,
}

/// How one request to a peer went.
pub(super) enum Called {
    Reply(Reply),
    /// Not sent whole: nothing happened there.
    Unreachable(String),
    /// Sent, reply lost: it may have taken effect.
    Lost(String),
}

impl Peer {
    pub fn new(holder: String, address: String, secret: Vec<u8>) -> Peer {
        Peer {
            holder,
            address,
            secret,
            idle: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(1),
        }
    }

    async fn conn(&self) -> Result<Conn, String> {
        loop {
            let Some(c) = lock(&self.idle).pop() else {
                break;
            };
            if c.alive() {
                return Ok(c);
            }
        }
        let connect = async {
            let mut stream = TcpStream::connect(self.address.as_str())
                .await
                .map_err(|e| e.to_string())?;
            let _ = stream.set_nodelay(true);
            wire::connect(&mut stream, &self.secret)
                .await
                .map_err(|e| e.to_string())?;
            Ok::<_, String>(stream)
        };
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, connect)
            .await
            .map_err(|_| "no answer in time".to_string())??;
        let (rd, wr) = stream.into_split();
        Ok(Conn { rd, wr })
    }

    /// Drops the pooled connections (the owner went away).
    fn forget_connections(&self) {
        lock(&self.idle).clear();
    }

    /// Sends `op` on queue `ref_` of `tenant` and waits for the reply; a
    /// `cancel` notified meanwhile is passed on (a waiting POP ends with
    /// 57014), as is this process's drain (a waiting POP returns).
    pub async fn call(
        &self,
        hub: &Ephemeral,
        tenant: Uuid,
        ref_: i64,
        op: Op,
        cancel: Option<&Notify>,
    ) -> Called {
        let wait = match &op {
            Op::Pop { wait, .. } => *wait,
            _ => None,
        };
        let mut c = match self.conn().await {
            Ok(c) => c,
            Err(e) => return Called::Unreachable(format!("cannot reach {}: {e}", self.address)),
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let frame = Inbound::Request(Request {
            id,
            tenant,
            ref_,
            op,
        })
        .encode();
        // Not written whole (an error, or an owner that stopped reading):
        // the owner cannot have read the request, so nothing happened.
        match tokio::time::timeout(REPLY_TIMEOUT, wire::write_frame(&mut c.wr, &frame)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                return Called::Unreachable(format!("cannot send to {}: {e}", self.address))
            }
            Err(_) => return Called::Unreachable(format!("{} takes no data", self.address)),
        }
        let bound = REPLY_TIMEOUT + wait.unwrap_or_default();
        let answer = {
            let read = tokio::time::timeout(bound, wire::read_frame(&mut c.rd, wire::MAX_FRAME));
            tokio::pin!(read);
            let (mut cancelled, mut stopped) = (false, false);
            loop {
                let cancel_now = async {
                    match cancel {
                        Some(n) if !cancelled => n.notified().await,
                        _ => std::future::pending().await,
                    }
                };
                let stop_now = async {
                    match stopped {
                        false => hub.draining.begun().await,
                        true => std::future::pending().await,
                    }
                };
                let passed_on = tokio::select! {
                    r = &mut read => break r,
                    () = cancel_now => {
                        cancelled = true;
                        Inbound::Cancel(id)
                    }
                    () = stop_now => {
                        stopped = true;
                        Inbound::Stop(id)
                    }
                };
                // A lost cancel: the read below tells what became of it.
                let _ = wire::write_frame(&mut c.wr, &passed_on.encode()).await;
            }
        };
        let body = match answer {
            Ok(Ok(body)) => body,
            Ok(Err(e)) => return Called::Lost(e.to_string()),
            Err(_) => return Called::Lost(format!("no reply within {bound:?}")),
        };
        match Reply::decode(&body) {
            Ok(reply) => {
                let mut idle = lock(&self.idle);
                if idle.len() < IDLE_KEPT {
                    idle.push(c);
                }
                Called::Reply(reply)
            }
            Err(e) => Called::Lost(e.to_string()),
        }
    }
}

/// What one forwarding attempt came to.
pub(super) enum Attempt {
    Reply(Reply),
    /// Nothing was done; look the owner up again and go again.
    Again,
}

/// The error of a request the owner did not answer once sent.
fn outcome_unknown(queue: &str, owner: &Peer, why: &str) -> SqlError {
    SqlError::error(
        SqlState::TRANSACTION_RESOLUTION_UNKNOWN,
        format!(
            "ephemeral queue \"{queue}\": the connection to its owner ({}) broke before the reply, \
             so the outcome of the statement is unknown ({why})",
            owner.holder
        ),
    )
}

impl Ephemeral {
    /// One forwarding attempt to `peer` (found by [`Ephemeral::route`]) for
    /// queue `ref_`; `since` is when the statement first tried, to bound
    /// the re-routing. An error reply of the owner comes back as `Err`, as
    /// the owner would have answered it.
    pub(super) async fn attempt(
        &self,
        peer: &Arc<Peer>,
        (tenant, ref_, queue): (Uuid, i64, &str),
        op: Op,
        cancel: Option<&Notify>,
        since: Instant,
    ) -> Result<Attempt, SqlError> {
        let why = match peer.call(self, tenant, ref_, op, cancel).await {
            Called::Reply(Reply::Error(e)) => return Err(e),
            Called::Reply(Reply::NotOwner) => format!("{} no longer owns it", peer.holder),
            Called::Reply(reply) => return Ok(Attempt::Reply(reply)),
            Called::Unreachable(why) => {
                peer.forget_connections();
                why
            }
            Called::Lost(why) => {
                peer.forget_connections();
                self.forget_remote(ref_, peer);
                return Err(outcome_unknown(queue, peer, &why));
            }
        };
        self.forget_remote(ref_, peer);
        if since.elapsed() >= REROUTE_FOR {
            return Err(SqlError::error(
                SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
                format!(
                    "ephemeral queue \"{queue}\": its owner cannot be reached and no new owner was elected in time ({why}); nothing was done, retry"
                ),
            ));
        }
        tokio::time::sleep(REROUTE_PAUSE).await;
        Ok(Attempt::Again)
    }

    /// (messages, pending) of a queue `holder` owns, asked once (SHOW
    /// QUEUES); `None` when it cannot say now.
    pub(super) async fn remote_counts(
        &self,
        tenant: Uuid,
        ref_: i64,
        holder: &str,
    ) -> Option<(i64, i64)> {
        let peer = self.peer_of(holder).await?;
        match peer.call(self, tenant, ref_, Op::Counts, None).await {
            Called::Reply(Reply::Seqs(c)) if c.len() == 2 => Some((c[0], c[1])),
            _ => None,
        }
    }

    fn forget_remote(&self, ref_: i64, peer: &Arc<Peer>) {
        let mut remote = lock(&self.remote);
        if remote.get(&ref_).is_some_and(|p| Arc::ptr_eq(p, peer)) {
            remote.remove(&ref_);
            // Owner of nothing here any more: its idle connections go.
            if !remote.values().any(|p| Arc::ptr_eq(p, peer)) {
                peer.forget_connections();
            }
        }
    }

    /// Runs an operation where queue `ref_` lives: `local` on this
    /// process's store, or `op` forwarded to the owner, whose reply
    /// `reply` reads (`None`: a reply of the wrong kind).
    pub(super) async fn at_owner<T>(
        &self,
        (tenant, ref_, queue): (Uuid, i64, &str),
        mut local: impl FnMut(&super::Owned) -> Result<T, SqlError>,
        op: impl Fn() -> Op,
        reply: impl Fn(Reply) -> Option<T>,
    ) -> Result<T, SqlError> {
        let since = Instant::now();
        loop {
            let peer = match self.route(ref_, queue).await? {
                Route::Local(o) => return local(&o),
                Route::Remote(peer) => peer,
            };
            match self
                .attempt(&peer, (tenant, ref_, queue), op(), None, since)
                .await?
            {
                Attempt::Again => continue,
                Attempt::Reply(r) => return reply(r).ok_or_else(|| mismatched(&peer)),
            }
        }
    }
}

/// Where this process takes forwarded statements, in `queen.ephemeral_peers`.
pub(super) async fn publish(client: &tokio_postgres::Client, hub: &Ephemeral) -> Step {
    let call = PeerPublish {
        holder: &hub.holder,
        address: &hub.internal.address,
        secret: hub.internal.secret(),
    };
    query(client, &call).await.map(drop)
}

/// Where `holder` takes forwarded statements (read once per holder: a
/// holder's address and secret are fixed for its life).
pub(super) async fn peer(
    client: &tokio_postgres::Client,
    hub: &Ephemeral,
    holder: &str,
) -> Result<Option<Arc<Peer>>, crate::backend::call::ClientCallError> {
    if let Some(p) = lock(&hub.peers).get(holder).cloned() {
        return Ok(Some(p));
    }
    let Some(row) = query(client, &PeerCall { holder })
        .await?
        .into_iter()
        .next()
    else {
        return Ok(None);
    };
    let peer = Arc::new(Peer::new(holder.to_string(), row.address, row.secret));
    let mut peers = lock(&hub.peers);
    // Holders of processes long gone are not kept for ever.
    if peers.len() > 64 {
        peers.clear();
    }
    Ok(Some(
        peers.entry(holder.to_string()).or_insert(peer).clone(),
    ))
}

/// At shutdown: stop serving the owned queues, then end their leases (and
/// the peer row) so another queenwire takes them over at its next
/// statement instead of after the lease. Bounded: a database that does not
/// answer leaves the leases to run out.
pub(super) async fn release(config: &tokio_postgres::Config, hub: &Ephemeral) {
    let owned = std::mem::take(&mut *lock(&hub.owned)).len();
    let handover = async {
        let (client, connection) = config.connect(tokio_postgres::NoTls).await.ok()?;
        tokio::spawn(connection);
        let call = crate::calls::ephemeral::Release {
            holder: &hub.holder,
        };
        query(&client, &call).await.ok()
    };
    if tokio::time::timeout(Duration::from_secs(2), handover)
        .await
        .ok()
        .flatten()
        .is_none()
        && owned > 0
    {
        tracing::warn!(
            queues = owned,
            "could not hand the ephemeral queues over: their leases run out within 5 s"
        );
    }
}

pub(super) fn mismatched(peer: &Peer) -> SqlError {
    SqlError::error(
        SqlState::INTERNAL_ERROR,
        format!(
            "the owning queenwire ({}) answered with a reply of the wrong kind",
            peer.holder
        ),
    )
}
