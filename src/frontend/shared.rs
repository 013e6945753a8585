//! What every session shares: the settings, the pools, the cancel
//! registry and the proxy-global names of prepared statements.

use super::slots::SessionSlots;
use crate::backend::{BackendKey, BackendTarget, Pool};
use crate::engine::Engine;
use crate::shutdown::ShutdownSignal;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Frontend settings.
#[derive(Clone)]
pub struct FrontendConfig {
    /// Users allowed in (SCRAM-SHA-256). `None`: no users file — loopback
    /// clients only, trusted, in the default tenant.
    pub users: Option<Arc<crate::users::Users>>,
    /// Key of the decoy verifiers shown for unknown users.
    pub decoy_secret: Vec<u8>,
    /// TLS for clients that ask (`sslmode=prefer|require`); `None`: declined.
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
    /// Pools logged in as the tenants' backend roles, by (tenant,
    /// read-only): plain SQL of users with a passthrough policy runs there.
    pub role_pools: HashMap<(uuid::Uuid, bool), Pool>,
    /// Without a users file: the pool clients' plain SQL (and everything
    /// inside their transactions) runs on, apart from the engine's, so the
    /// engine's own statements stay off connections clients are handed.
    pub client_pool: Option<Pool>,
    pub target: Arc<BackendTarget>,
    pub registry: CancelRegistry,
    pub statement_names: StatementNames,
    pub engine: Arc<Engine>,
    /// Begins when the server shuts down; a session may stop on it.
    pub shutdown: ShutdownSignal,
    /// The connection cap; a session's task holds a slot while it lives.
    pub slots: SessionSlots,
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
        shutdown: ShutdownSignal,
    ) -> Shared {
        Shared {
            client_pool,
            slots: SessionSlots::new(config.max_connections),
            shutdown,
            config,
            pool,
            role_pools,
            target,
            engine,
            registry: CancelRegistry::default(),
            statement_names: StatementNames::default(),
            next_session: AtomicU64::new(1),
        }
    }

    pub fn next_session_id(&self) -> u64 {
        self.next_session.fetch_add(1, Ordering::Relaxed)
    }
}

/// The part of a session a cancel request reaches.
#[derive(Default)]
pub struct SessionHandle {
    backend: Mutex<Option<BackendKey>>,
    /// The session as the admin view lists it (set once it starts).
    pub observed: std::sync::OnceLock<Arc<crate::metrics::clients::ClientInfo>>,
    /// Wakes a statement the proxy itself is waiting in (a POP … WAIT).
    pub cancel: Arc<tokio::sync::Notify>,
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

    fn backend(&self) -> Option<BackendKey> {
        self.backend.lock().ok().and_then(|g| *g)
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
        handle.cancel.notify_waiters();
        if let Some(key) = handle.backend() {
            if let Err(e) = target.cancel(key).await {
                tracing::warn!("forwarding a cancel request failed: {e}");
            }
        }
    }
}

/// Names for the client's prepared statements on backend connections: one
/// of its own for each named Parse a client sends, so a statement is only
/// ever parsed from that Parse (again, where the session lands on a
/// connection that lacks it) and never taken over from another session's,
/// which may have been parsed before DDL this one saw.
#[derive(Default)]
pub struct StatementNames {
    next: AtomicU64,
}

impl StatementNames {
    pub fn fresh(&self) -> Arc<str> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        Arc::from(format!("qw_s{n}"))
    }
}
