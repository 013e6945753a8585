//! What every session shares: the settings, the pools, the cancel
//! registry and the proxy-global names of prepared statements.

use super::slots::SessionSlots;
use crate::backend::{BackendKey, BackendTarget, Pool};
use crate::engine::Engine;
use crate::rewrite::statement_names::{named_statements, NamedBy};
use crate::shutdown::ShutdownSignal;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

/// Frontend settings.
#[derive(Clone)]
pub struct FrontendConfig {
    /// Users allowed in (SCRAM-SHA-256) as loaded at start. `None`: no
    /// users file — loopback clients only, trusted, in the default tenant.
    /// Whether there is a users file never changes; the users in it may
    /// (SIGHUP): logins read [`Shared::users`].
    pub users: Option<Arc<crate::users::Users>>,
    /// Key of the decoy verifiers shown for unknown users.
    pub decoy_secret: Vec<u8>,
    /// TLS for clients that ask (`sslmode=prefer|require`) as configured
    /// at start; `None`: declined. Handshakes use [`Shared::tls`] (SIGHUP
    /// may have replaced the certificate).
    pub tls: Option<tokio_rustls::TlsAcceptor>,
    /// Plaintext logins are refused.
    pub require_tls: bool,
    /// Most client connections at once; more are refused with 53300.
    pub max_connections: usize,
    /// A client must finish startup and authentication within this.
    pub startup_timeout: std::time::Duration,
    /// A client idle this long inside a transaction block is disconnected
    /// and its transaction rolled back (`None`: never).
    pub idle_in_transaction_timeout: Option<std::time::Duration>,
    /// A session waiting this long for a free backend connection gets
    /// 53300 instead (`None`: it waits as long as it takes).
    pub pool_wait_timeout: Option<std::time::Duration>,
    /// How sessions share backend connections.
    pub pool_mode: PoolMode,
    /// Largest message a client may send.
    pub max_message_size: usize,
}

/// How client sessions share backend connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PoolMode {
    /// A connection per transaction (or per pinned session), given back
    /// when idle.
    #[default]
    Transaction,
    /// One connection for each client session's whole life.
    Session,
}

/// What every session shares.
pub struct Shared {
    pub config: FrontendConfig,
    pub pool: Pool,
    /// Users, certificate and tenant role pools, replaced on reload.
    live: Live,
    /// Without a users file: the pool clients' plain SQL (and everything
    /// inside their transactions) runs on, apart from the engine's, so the
    /// engine's own statements stay off connections clients are handed.
    pub client_pool: Option<Pool>,
    pub target: Arc<BackendTarget>,
    pub registry: CancelRegistry,
    pub statement_names: StatementNames,
    pub engine: Arc<Engine>,
    /// Begins when the server starts to drain: the listener stops, a
    /// session closes at its next idle point (see `session/idle.rs`).
    pub shutdown: ShutdownSignal,
    /// Begins when the drain timeout has passed: every session closes.
    pub terminate: ShutdownSignal,
    /// The connection cap; a session's task holds a slot while it lives.
    pub slots: SessionSlots,
    /// Clients' LISTEN served from one shared connection.
    pub listen: Arc<crate::frontend::listen::ListenHub>,
    next_session: AtomicU64,
}

impl Shared {
    pub fn new(
        config: FrontendConfig,
        pool: Pool,
        role_pools: HashMap<(uuid::Uuid, bool), Pool>,
        client_pool: Option<Pool>,
        target: Arc<BackendTarget>,
        engine: Arc<Engine>,
        shutdown: &crate::shutdown::Shutdown,
    ) -> Shared {
        Shared {
            live: Live {
                users: RwLock::new(config.users.clone()),
                tls: RwLock::new(config.tls.clone()),
                role_pools: RwLock::new(role_pools),
            },
            terminate: shutdown.terminate_signal(),
            client_pool,
            slots: SessionSlots::new(config.max_connections),
            shutdown: shutdown.drain_signal(),
            config,
            pool,
            target,
            engine,
            registry: CancelRegistry::default(),
            listen: Arc::default(),
            statement_names: StatementNames::default(),
            next_session: AtomicU64::new(1),
        }
    }

    pub fn next_session_id(&self) -> u64 {
        self.next_session.fetch_add(1, Ordering::Relaxed)
    }

    /// The users a login is checked against now (`None`: no users file).
    pub fn users(&self) -> Option<Arc<crate::users::Users>> {
        self.live.users.read().map_or(None, |u| u.clone())
    }

    /// The TLS acceptor a handshake uses now.
    pub fn tls(&self) -> Option<tokio_rustls::TlsAcceptor> {
        self.live.tls.read().map_or(None, |t| t.clone())
    }

    /// The pool of a tenant's backend role (plain SQL of users with a
    /// passthrough policy runs there), by (tenant, read-only).
    pub fn role_pool(&self, tenant: uuid::Uuid, read_only: bool) -> Option<Pool> {
        self.live
            .role_pools
            .read()
            .ok()
            .and_then(|p| p.get(&(tenant, read_only)).cloned())
    }

    /// Every tenant role's pool now, by (tenant, read-only).
    pub fn role_pools(&self) -> Vec<((uuid::Uuid, bool), Pool)> {
        self.live.role_pools.read().map_or(Vec::new(), |p| {
            p.iter().map(|(k, v)| (*k, v.clone())).collect()
        })
    }

    /// Where stream expressions are evaluated (`engine::streams`): the
    /// tenant's own backend role, the read-only one first; without a users
    /// file, the engine's pool.
    pub fn install_stream_evaluators(self: &Arc<Shared>, has_users: bool) {
        let weak = Arc::downgrade(self);
        let engine_pool = self.pool.clone();
        self.engine.streams.set(Box::new(move |tenant| {
            if !has_users {
                return Some(engine_pool.clone());
            }
            let shared = weak.upgrade()?;
            shared
                .role_pool(tenant, true)
                .or_else(|| shared.role_pool(tenant, false))
        }));
    }

    /// Whether a pool for this (tenant, read-only) exists already.
    pub fn has_role_pool(&self, tenant: uuid::Uuid, read_only: bool) -> bool {
        self.role_pool(tenant, read_only).is_some()
    }

    /// A reloaded users file, with the pools of the tenant roles it added.
    /// Sessions already in keep what they logged in with; only new logins
    /// see the new users.
    pub fn replace_users(
        &self,
        users: Arc<crate::users::Users>,
        new_pools: HashMap<(uuid::Uuid, bool), Pool>,
    ) {
        if let Ok(mut pools) = self.live.role_pools.write() {
            pools.extend(new_pools);
        }
        if let Ok(mut live) = self.live.users.write() {
            *live = Some(users);
        }
    }

    /// A reloaded certificate and key: new handshakes use them.
    pub fn replace_tls(&self, tls: tokio_rustls::TlsAcceptor) {
        if let Ok(mut live) = self.live.tls.write() {
            *live = Some(tls);
        }
    }

    /// The drain timeout passed: the statements sessions still run are
    /// cancelled (on the backend, and a POP … WAIT in the proxy), so each
    /// session reaches the idle point where it closes.
    pub async fn cancel_statements(&self) {
        self.registry.cancel_all(&self.target).await;
    }
}

/// What a reload (SIGHUP) replaces.
struct Live {
    users: RwLock<Option<Arc<crate::users::Users>>>,
    tls: RwLock<Option<tokio_rustls::TlsAcceptor>>,
    role_pools: RwLock<HashMap<(uuid::Uuid, bool), Pool>>,
}

/// The part of a session a cancel request reaches.
#[derive(Default)]
pub struct SessionHandle {
    backend: Mutex<Option<BackendKey>>,
    /// The session as the admin view lists it (set once it starts).
    pub observed: std::sync::OnceLock<Arc<crate::metrics::clients::ClientInfo>>,
    /// Wakes a statement the proxy itself is waiting in (a POP … WAIT).
    pub cancel: Arc<crate::engine::lend::CancelSignal>,
    /// Cancel requests forwarded for the session, not yet taken by PostgreSQL.
    cancels: Arc<CancelsUnderWay>,
}

/// A session's cancel requests on their way to PostgreSQL. A connection the
/// session lets go while one is under way goes back to the pool only once
/// PostgreSQL has taken it (the postmaster signalled the backend and closed
/// the cancel's socket): handed to another session before, the signal
/// could land on that session's statement.
#[derive(Default)]
pub struct CancelsUnderWay {
    count: AtomicUsize,
    settled: tokio::sync::Notify,
}

impl CancelsUnderWay {
    /// Returns when no cancel is under way.
    pub async fn settled(&self) {
        loop {
            let notified = self.settled.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            if self.count.load(Ordering::SeqCst) == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// One cancel under way, until it drops.
struct UnderWay(Arc<CancelsUnderWay>);

impl Drop for UnderWay {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.settled.notify_waiters();
        }
    }
}

impl SessionHandle {
    pub fn set_backend(&self, key: Option<BackendKey>) {
        if let Some(info) = self.observed.get() {
            info.set_backend(key.map(|k| k.pid));
        }
        if let Ok(mut guard) = self.backend.lock() {
            *guard = key;
        }
    }

    /// The connection the session holds, with its cancel marked under way
    /// (under the lock [`SessionHandle::set_backend`] takes, so a
    /// connection let go after this sees the mark).
    fn backend_to_cancel(&self) -> Option<(BackendKey, UnderWay)> {
        let guard = self.backend.lock().ok()?;
        let key = (*guard)?;
        self.cancels.count.fetch_add(1, Ordering::SeqCst);
        Some((key, UnderWay(self.cancels.clone())))
    }

    /// The session's cancels still under way, if any: call after
    /// `set_backend(None)`, before the connection goes back to the pool.
    pub fn cancels_under_way(&self) -> Option<Arc<CancelsUnderWay>> {
        (self.cancels.count.load(Ordering::SeqCst) > 0).then(|| self.cancels.clone())
    }

    /// Cancels the statement the session runs: a wait of the proxy's own
    /// (a POP … WAIT) if one is in progress, else whatever runs on the
    /// backend connection the session holds. A statement waiting in the
    /// proxy runs nothing on that backend: the cancel is its alone. Sent
    /// on to that backend as well, it would arrive after the 57014 and
    /// could cancel the client's next statement instead (seen with
    /// pgjdbc's setQueryTimeout: the SELECT 1 after the wait).
    pub async fn cancel_statement(&self, target: &BackendTarget) -> std::io::Result<()> {
        if self.cancel.cancel() {
            return Ok(());
        }
        match self.backend_to_cancel() {
            Some((key, _under_way)) => target.cancel(key).await,
            None => Ok(()),
        }
    }
}

/// Sessions by the (pid, secret) key the proxy gave their clients.
#[derive(Default)]
pub struct CancelRegistry {
    sessions: Mutex<HashMap<(i32, i32), Arc<SessionHandle>>>,
}

impl CancelRegistry {
    pub fn register(&self, pid: i32, secret: i32, handle: Arc<SessionHandle>) {
        if let Ok(mut map) = self.sessions.lock() {
            map.insert((pid, secret), handle);
        }
    }

    pub fn unregister(&self, pid: i32, secret: i32) {
        if let Ok(mut map) = self.sessions.lock() {
            map.remove(&(pid, secret));
        }
    }

    /// Forwards a cancel to the backend connection the session holds, if
    /// any. An unknown key is ignored, as PostgreSQL does.
    pub async fn cancel(&self, pid: i32, secret: i32, target: &BackendTarget) {
        let handle = self
            .sessions
            .lock()
            .ok()
            .and_then(|map| map.get(&(pid, secret)).cloned());
        let Some(handle) = handle else { return };
        if let Err(e) = handle.cancel_statement(target).await {
            tracing::warn!("forwarding a cancel request failed: {e}");
        }
    }
}

impl CancelRegistry {
    /// A cancel for every session (see [`CancelRegistry::cancel`]), all
    /// at once.
    pub async fn cancel_all(&self, target: &BackendTarget) {
        let handles: Vec<Arc<SessionHandle>> = match self.sessions.lock() {
            Ok(map) => map.values().cloned().collect(),
            Err(_) => return,
        };
        let cancels = handles.into_iter().map(|handle| async move {
            if let Err(e) = handle.cancel_statement(target).await {
                tracing::debug!("cancelling a statement at shutdown failed: {e}");
            }
        });
        futures::future::join_all(cancels).await;
    }
}

/// Names for the client's prepared statements on backend connections: one
/// of its own for each named Parse a client sends, so a statement is only
/// ever parsed from that Parse (again, where the session lands on a
/// connection that lacks it) and never taken over from another session's,
/// which may have been parsed before DDL this one saw. The names carry a
/// random prefix drawn at start, and every name with it is reserved: a
/// client's SQL never names one (`reserved_in`), though any client can
/// read them in `pg_prepared_statements`.
pub struct StatementNames {
    prefix: Arc<str>,
    next: AtomicU64,
}

impl Default for StatementNames {
    fn default() -> Self {
        StatementNames {
            prefix: Arc::from(format!("qw_{:016x}_", rand::random::<u64>())),
            next: AtomicU64::new(0),
        }
    }
}

impl StatementNames {
    pub fn fresh(&self) -> Arc<str> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        Arc::from(format!("{}{n}", self.prefix))
    }

    /// What every name the proxy gives statements starts with.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The same, to keep.
    pub fn shared_prefix(&self) -> Arc<str> {
        self.prefix.clone()
    }

    /// Whether `name` is one the proxy gives statements (or could).
    pub fn reserves(&self, name: &str) -> bool {
        name.starts_with(&*self.prefix)
    }

    /// The first reserved name `sql` names with PREPARE, EXECUTE or
    /// DEALLOCATE. Only a text that spells the prefix (in any case) or has
    /// a `U&"…"` identifier, which could spell it, is tokenized.
    pub fn reserved_in(&self, sql: &str) -> Option<(NamedBy, String)> {
        let prefix = self.prefix.as_bytes();
        let mentioned = sql
            .as_bytes()
            .windows(prefix.len())
            .any(|w| w.eq_ignore_ascii_case(prefix) || w[..3].eq_ignore_ascii_case(b"u&\""));
        if !mentioned {
            return None;
        }
        named_statements(sql)
            .into_iter()
            .find(|(_, name)| self.reserves(name))
    }
}
