//! Wiring: backend (embedded or external), schema apply, pool, listener.

mod reload;

use crate::backend::{pool, BackendError, BackendTarget};
use crate::embedded::{EmbeddedError, EmbeddedPostgres};
use crate::engine::fusion::Fuser;
use crate::engine::kv::KvState;
use crate::engine::queues::Limits;
use crate::engine::receipt::ReceiptKey;
use crate::engine::schema::{self, SchemaError};
use crate::engine::{ephemeral::Ephemeral, maintenance, timers, wake, Engine};
use crate::frontend::slots::SessionSlots;
use crate::frontend::tls::tls_acceptor;
pub use crate::frontend::tls::TlsFiles;
use crate::frontend::{self, FrontendConfig, Shared};
use crate::metrics::gauges::Gauges;
use crate::metrics::http::Exporter;
use crate::metrics::Metrics;
use crate::shutdown::Shutdown;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::task::JoinHandle;

/// Connections of the timer firing loop (it fires one batch at a time).
const TIMER_POOL_SIZE: usize = 2;

/// `application_name` of queenwire's own background connections (schema
/// apply, wake-ups), to tell them apart from the pool in pg_stat_activity.
pub const BACKGROUND_APPLICATION_NAME: &str = "queenwire background";

#[derive(Debug, Clone)]
pub struct Config {
    /// Address to listen on, e.g. `127.0.0.1:6543`.
    pub listen: String,
    /// A directory for a Unix socket `.s.PGSQL.<port>` too (the TCP
    /// port's number), as PostgreSQL's `unix_socket_directories`.
    pub unix_socket_dir: Option<PathBuf>,
    pub backend: Backend,
    /// Backend connections in the pool.
    pub pool_size: usize,
    /// The users file (SCRAM-SHA-256 verifiers, tenants, passthrough
    /// policies). `None`: only loopback clients, trusted.
    pub users: Option<Arc<crate::users::Users>>,
    /// Where `users` was read from: [`Server::reload`] reads it again.
    pub users_path: Option<PathBuf>,
    /// How long a drain waits for sessions inside a transaction block (and
    /// running statements) before it closes them.
    pub shutdown_timeout: std::time::Duration,
    /// Apply `sql/` at boot (`QUEEN_APPLY_SCHEMA=0` turns it off).
    pub apply_schema: bool,
    /// Largest message a client may send, in bytes.
    pub max_message_size: usize,
    /// Largest message payload a PUSH accepts, in bytes.
    pub max_payload: usize,
    /// Start with the KV surface paused.
    pub kv_paused: bool,
    /// Certificate and key for TLS with clients.
    pub tls: Option<TlsFiles>,
    /// Refuse plaintext logins.
    pub require_tls: bool,
    /// Most client connections at once (more get 53300).
    pub max_connections: usize,
    /// Time a client has to finish startup and authentication.
    pub startup_timeout: std::time::Duration,
    /// Idle time inside a transaction block after which the client is
    /// disconnected and its transaction rolled back (`None`: never).
    pub idle_in_transaction_timeout: Option<std::time::Duration>,
    /// Longest a session waits for a free backend connection before its
    /// statement fails with 53300 (`None`: as long as it takes).
    pub pool_wait_timeout: Option<std::time::Duration>,
    /// How sessions share backend connections.
    pub pool_mode: crate::frontend::PoolMode,
    /// The retention and cleanup cycle (the queues' options say what is
    /// due; this says how often and how old an empty partition must be).
    pub retention: crate::engine::retention::RetentionSettings,
    /// Address of the Prometheus endpoint (`/metrics`, `/health`,
    /// `/ready`); `None`: off.
    pub metrics_listen: Option<String>,
    /// Distinct queues with per-queue series before the rest share `other`.
    pub metrics_queue_cap: usize,
    /// How often this process's counters go to `queen.worker_metrics`.
    pub metrics_flush_interval: std::time::Duration,
    /// The encryption keys (`--encryption-key-file`; SIGHUP reloads them).
    pub sealing: Arc<crate::engine::sealing::Sealing>,
    /// The channel other queenwires forward ephemeral statements on.
    pub internal: crate::engine::ephemeral::Internal,
}

#[derive(Debug, Clone)]
pub enum Backend {
    /// A private cluster in this directory, started and stopped with the proxy.
    Embedded { data_dir: PathBuf },
    /// An existing PostgreSQL.
    External(Box<tokio_postgres::Config>),
}

impl Default for Config {
    fn default() -> Config {
        Config {
            listen: "127.0.0.1:6543".into(),
            unix_socket_dir: None,
            backend: Backend::Embedded {
                data_dir: PathBuf::from("queenwire-data"),
            },
            pool_size: 16,
            users: None,
            users_path: None,
            shutdown_timeout: std::time::Duration::from_secs(30),
            apply_schema: true,
            max_message_size: 64 * 1024 * 1024,
            max_payload: 1024 * 1024,
            kv_paused: false,
            tls: None,
            require_tls: false,
            max_connections: 1000,
            startup_timeout: std::time::Duration::from_secs(10),
            idle_in_transaction_timeout: Some(std::time::Duration::from_secs(600)),
            pool_wait_timeout: Some(std::time::Duration::from_secs(120)),
            pool_mode: crate::frontend::PoolMode::Transaction,
            retention: crate::engine::retention::RetentionSettings::default(),
            metrics_listen: None,
            metrics_queue_cap: crate::metrics::DEFAULT_QUEUE_CAP,
            metrics_flush_interval: crate::metrics::flush::FLUSH_INTERVAL,
            sealing: Arc::default(),
            internal: Default::default(),
        }
    }
}

/// The backend login role of every (tenant, read-only) pair the users file
/// needs for plain SQL, made (or refreshed) with
/// `queen.tenant_role_ensure_v1`, each with a pool of its own. The roles log
/// in with queenwire's own backend password (PostgreSQL keeps a SCRAM
/// verifier of it); users with passthrough `none` need no role.
/// Pairs `have` says exist already are skipped (a reload adds only the new).
async fn tenant_role_pools(
    client: &tokio_postgres::Client,
    users: &crate::users::Users,
    target: &BackendTarget,
    pool_size: usize,
    have: impl Fn(uuid::Uuid, bool) -> bool,
) -> Result<HashMap<(uuid::Uuid, bool), pool::Pool>, StartError> {
    use crate::users::Passthrough;
    let mut needed: Vec<(uuid::Uuid, bool)> = users
        .users
        .values()
        .filter_map(|u| match u.passthrough {
            Passthrough::None => None,
            Passthrough::ReadOnly => Some((u.tenant, true)),
            Passthrough::Full => Some((u.tenant, false)),
        })
        .collect();
    needed.retain(|(tenant, read_only)| !have(*tenant, *read_only));
    needed.sort();
    needed.dedup();
    let verifier = target
        .password
        .as_ref()
        .map(|p| crate::users::Verifier::new(&String::from_utf8_lossy(p)).encode());
    let mut pools = HashMap::new();
    for (tenant, read_only) in needed {
        // Two brokers booting at once may collide on the shared catalogs
        // (a role is cluster-wide): try again a few times.
        let mut attempt = 0;
        let role: String = loop {
            match client
                .query_one(
                    "SELECT queen.tenant_role_ensure_v1($1, $2, $3)::TEXT",
                    &[&tenant, &read_only, &verifier],
                )
                .await
            {
                Ok(row) => break row.get(0),
                Err(e) if attempt >= 4 => {
                    return Err(StartError::TenantRoles(format!(
                        "cannot make the backend role of tenant {tenant}: {}",
                        e.as_db_error()
                            .map_or(e.to_string(), |d| d.message().to_string())
                    )))
                }
                Err(_) => {
                    attempt += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(50 * attempt)).await;
                }
            }
        };
        let role_target = Arc::new(BackendTarget {
            user: role,
            ..target.clone()
        });
        pools.insert(
            (tenant, read_only),
            pool::build_pool(role_target, pool_size)?,
        );
    }
    Ok(pools)
}

/// What [`Server::reload`] reads again and needs to make tenant roles.
struct ReloadFrom {
    users_path: Option<PathBuf>,
    tls: Option<TlsFiles>,
    /// queenwire's own backend login, for `queen.tenant_role_ensure_v1`.
    background: tokio_postgres::Config,
    target: Arc<BackendTarget>,
    pool_size: usize,
}

/// How a drain went.
#[derive(Debug, Default, Clone, Copy)]
pub struct DrainReport {
    /// Sessions that ended on their own or at an idle point.
    pub drained: usize,
    /// Sessions still open when the timeout passed (closed with 57P01,
    /// their transactions rolled back).
    pub terminated: usize,
    /// Sessions that had not ended even after their statements were
    /// cancelled (dropped with the process).
    pub abandoned: usize,
}

/// After the drain timeout, how long closed sessions get to go (their
/// statements cancelled, 57P01 sent, their connections given back).
const TERMINATE_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// The sessions' pools as the metrics and the admin view name them:
/// `engine`, `clients`, and each tenant role by the name
/// `queen.tenant_role_ensure_v1` gives it.
fn pool_labels(shared: &Shared) -> Vec<(String, pool::Pool)> {
    let mut pools = vec![("engine".to_string(), shared.pool.clone())];
    if let Some(p) = &shared.client_pool {
        pools.push(("clients".to_string(), p.clone()));
    }
    let mut roles = shared.role_pools();
    roles.sort_by_key(|(key, _)| *key);
    for ((tenant, read_only), p) in roles {
        let suffix = if read_only { "_ro" } else { "" };
        pools.push((format!("queen_t_{}{suffix}", tenant.simple()), p));
    }
    pools
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("tenant roles: {0} (the schema owner needs CREATEROLE, and queenwire's backend role membership in queen_engine; see docs/security.md)")]
    TenantRoles(String),
    #[error("TLS: {0}")]
    Tls(String),
    #[error(transparent)]
    Embedded(#[from] EmbeddedError),
    #[error("backend: {0}")]
    Backend(#[from] BackendError),
    #[error("backend: {}", with_causes(.0))]
    Connect(#[from] tokio_postgres::Error),
    #[error("schema: {0}")]
    Schema(#[from] SchemaError),
    #[error("cannot listen on {0}: {1}")]
    Listen(String, std::io::Error),
    #[error("refusing to listen on {0} without a users file: without one, clients are trusted, so queenwire listens on loopback only (give --users, see `queenwire user add`)")]
    Insecure(String),
    #[error("embedded PostgreSQL launcher: {0}")]
    Join(#[from] tokio::task::JoinError),
}

/// An error and what caused it, as one line: tokio-postgres says only
/// "db error" or "error connecting to server" and keeps PostgreSQL's
/// message or the OS error as its source.
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = c.source();
    }
    text
}

/// A running queenwire.
pub struct Server {
    pub local_addr: SocketAddr,
    /// The Unix socket clients may connect on, when there is one.
    pub unix_socket: Option<PathBuf>,
    /// One line saying which backend serves this proxy.
    pub backend_description: String,
    /// Where `/metrics` is served, when it is.
    pub metrics_addr: Option<SocketAddr>,
    pub metrics: Arc<Metrics>,
    shutdown: Shutdown,
    shutdown_timeout: std::time::Duration,
    shared: Arc<Shared>,
    reload: ReloadFrom,
    listener_task: JoinHandle<()>,
    /// Wake-ups, timer firing, maintenance: each stops on the shutdown
    /// signal.
    background_tasks: Vec<JoinHandle<()>>,
    slots: SessionSlots,
    kv: Arc<KvState>,
    embedded: Option<EmbeddedPostgres>,
}

impl Server {
    pub async fn start(config: Config) -> Result<Server, StartError> {
        let (embedded, client_config, description) = match &config.backend {
            Backend::Embedded { data_dir } => {
                let dir = data_dir.clone();
                let pg =
                    tokio::task::spawn_blocking(move || EmbeddedPostgres::start(&dir)).await??;
                let cfg = pg.client_config();
                let description = format!("embedded PostgreSQL in {}", data_dir.display());
                (Some(pg), cfg, description)
            }
            Backend::External(cfg) => {
                let hosts: Vec<String> = cfg
                    .get_hosts()
                    .iter()
                    .map(|h| match h {
                        tokio_postgres::config::Host::Tcp(s) => s.clone(),
                        tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
                    })
                    .collect();
                let description = format!(
                    "PostgreSQL at {} database {}",
                    hosts.join(","),
                    cfg.get_dbname().unwrap_or("(default)")
                );
                (None, (**cfg).clone(), description)
            }
        };

        let (client, connection) = {
            let mut cfg = client_config.clone();
            cfg.application_name(BACKGROUND_APPLICATION_NAME);
            cfg.connect(tokio_postgres::NoTls).await?
        };
        let conn_task = tokio::spawn(async move {
            let _ = connection.await;
        });
        schema::check_version(&client).await?;
        let version: String = client
            .query_one("SELECT current_setting('server_version')", &[])
            .await?
            .get(0);
        if config.apply_schema {
            schema::apply(&client).await?;
        }
        let candidate: Vec<u8> = (0..32).map(|_| rand::random::<u8>()).collect();
        let secret: Vec<u8> = client
            .query_one("SELECT queen.receipt_secret_v1($1)", &[&candidate])
            .await?
            .get(0);
        let target = Arc::new(BackendTarget::from_config(&client_config)?);
        let role_pools = match &config.users {
            Some(users) => {
                tenant_role_pools(&client, users, &target, config.pool_size, |_, _| false).await?
            }
            None => HashMap::new(),
        };
        drop(client);
        let _ = conn_task.await;

        let pool = pool::build_pool(target.clone(), config.pool_size)?;
        let listener = frontend::accept::bind_tcp(&config.listen)
            .await
            .map_err(|e| StartError::Listen(config.listen.clone(), e))?;
        if config.users.is_none() {
            let addr = listener
                .local_addr()
                .map_err(|e| StartError::Listen(config.listen.clone(), e))?;
            if !addr.ip().is_loopback() {
                return Err(StartError::Insecure(config.listen.clone()));
            }
        }
        let local_addr = listener
            .local_addr()
            .map_err(|e| StartError::Listen(config.listen.clone(), e))?;
        let unix = match &config.unix_socket_dir {
            Some(dir) => Some(
                frontend::accept::bind_unix(dir, local_addr.port())
                    .map_err(|e| StartError::Listen(dir.display().to_string(), e))?,
            ),
            None => None,
        };
        let unix_socket = unix.as_ref().map(|(_, file)| file.path().to_path_buf());
        let metrics_listener = match &config.metrics_listen {
            Some(addr) => Some(
                frontend::accept::bind_tcp(addr)
                    .await
                    .map_err(|e| StartError::Listen(addr.clone(), e))?,
            ),
            None => None,
        };
        let waiters = Arc::new(wake::Waiters::new(&secret));
        let (announcer, announcements) = wake::Announcer::new(waiters.clone());
        let kv = Arc::new(KvState::default());
        kv.set_paused(config.kv_paused);
        let shutdown = Shutdown::new();
        let metrics = Arc::new(Metrics::new(
            config.metrics_queue_cap,
            config.users.is_none(),
        ));
        let fuser = Fuser::new(pool.clone(), announcer.clone(), config.sealing.clone());
        let internal = (config.internal.bind(local_addr).await)
            .map_err(|e| StartError::Listen(config.internal.to_string(), e))?;
        let engine = Arc::new(Engine {
            ephemeral: Ephemeral::start(client_config.clone(), local_addr, internal, &shutdown),
            draining: shutdown.drain_signal(),
            metrics: metrics.clone(),
            kv: kv.clone(),
            receipts: ReceiptKey::new(secret),
            fuser: Arc::new(fuser),
            sealing: config.sealing.clone(),
            limits: Limits {
                max_payload: config.max_payload,
            },
            announcer,
            streams: Arc::new(crate::engine::streams::Evaluators::default()),
        });
        let shared = Arc::new(Shared::new(
            FrontendConfig {
                users: config.users.clone(),
                tls: match &config.tls {
                    Some(files) => Some(tls_acceptor(files).map_err(StartError::Tls)?),
                    None => None,
                },
                require_tls: config.require_tls,
                max_connections: config.max_connections,
                startup_timeout: config.startup_timeout,
                idle_in_transaction_timeout: config.idle_in_transaction_timeout,
                pool_wait_timeout: config.pool_wait_timeout,
                pool_mode: config.pool_mode,
                decoy_secret: (0..32).map(|_| rand::random::<u8>()).collect(),
                max_message_size: config.max_message_size,
            },
            pool.clone(),
            role_pools,
            match config.users {
                None => Some(pool::build_pool(target.clone(), config.pool_size)?),
                Some(_) => None,
            },
            target.clone(),
            engine.clone(),
            &shutdown,
        ));
        shared.install_stream_evaluators(config.users.is_some());
        let slots = shared.slots.clone();
        let listen_hub = shared.listen.clone();
        let mut pools = pool_labels(&shared);
        let shared_target = target;
        let listener_task = tokio::spawn(frontend::serve(
            frontend::accept::Listeners {
                tcp: listener,
                unix,
            },
            shared.clone(),
        ));
        let mut background = client_config.clone();
        background.application_name(BACKGROUND_APPLICATION_NAME);
        let reload = ReloadFrom {
            users_path: config.users_path.clone(),
            tls: config.tls.clone(),
            background: background.clone(),
            target: shared_target.clone(),
            pool_size: config.pool_size,
        };
        // Connections of their own, which no client is ever handed.
        let background_pool = |size| {
            let target = BackendTarget {
                application_name: Some(BACKGROUND_APPLICATION_NAME.into()),
                ..(*shared_target).clone()
            };
            pool::build_pool(Arc::new(target), size)
        };
        let (timer_pool, stream_pool) = (
            background_pool(TIMER_POOL_SIZE)?,
            background_pool(crate::engine::streams::runner::POOL_SIZE)?,
        );
        pools.push(("timers".to_string(), timer_pool.clone()));
        pools.push(("streams".to_string(), stream_pool.clone()));
        metrics.set_pools(pools);
        let mut background_tasks = vec![
            tokio::spawn(frontend::listen::run(
                background.clone(),
                listen_hub,
                shutdown.signal(),
            )),
            tokio::spawn(wake::run(
                background.clone(),
                waiters,
                announcements,
                shutdown.signal(),
            )),
            tokio::spawn(timers::fire_loop(
                timer_pool,
                engine.announcer.clone(),
                engine.sealing.clone(),
                shutdown.signal(),
            )),
            tokio::spawn(crate::engine::streams::run(
                stream_pool,
                engine.clone(),
                shutdown.signal(),
            )),
            tokio::spawn(crate::metrics::MAINTENANCE.scope(
                metrics.clone(),
                maintenance::run(
                    background.clone(),
                    kv.clone(),
                    config.retention,
                    shutdown.signal(),
                ),
            )),
            tokio::spawn(crate::metrics::flush::run(
                background.clone(),
                metrics.clone(),
                config.metrics_flush_interval,
                shutdown.signal(),
            )),
        ];
        let mut metrics_addr = None;
        if let Some(listener) = metrics_listener {
            metrics_addr = listener.local_addr().ok();
            let exporter = Arc::new(Exporter {
                metrics: metrics.clone(),
                gauges: Gauges::new(background, config.metrics_queue_cap),
                draining: shutdown.drain_signal(),
            });
            background_tasks.push(tokio::spawn(crate::metrics::http::serve(
                listener,
                exporter,
                shutdown.signal(),
            )));
        }
        Ok(Server {
            local_addr,
            unix_socket,
            backend_description: format!("{description} (PostgreSQL {version})"),
            metrics_addr,
            metrics,
            shutdown,
            shutdown_timeout: config.shutdown_timeout,
            shared,
            reload,
            listener_task,
            background_tasks,
            slots,
            kv,
            embedded,
        })
    }

    /// Resolves when the embedded PostgreSQL has exited on its own (a
    /// crash, a kill): no client can be served any more, and the process
    /// should end so that whatever supervises it starts it again (a new
    /// start recovers the cluster). Never resolves for an external backend,
    /// whose restarts the pool rides out.
    pub async fn embedded_exited(&self) {
        let Some(pg) = &self.embedded else {
            return std::future::pending().await;
        };
        while !pg.exited() {
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
        tracing::error!(
            pid = pg.pid(),
            "the embedded PostgreSQL exited unexpectedly (see postgres.log in the data directory); queenwire stops"
        );
    }

    /// Pauses or resumes the KV surface: while paused, KV statements fail
    /// with `55000` and everything else keeps working.
    pub fn set_kv_paused(&self, paused: bool) {
        self.kv.set_paused(paused);
    }

    /// Client sessions running now.
    pub fn live_sessions(&self) -> usize {
        self.slots.live()
    }

    /// Drains (see [`Server::drain`]) with no second signal.
    pub async fn shutdown(self) -> DrainReport {
        self.drain(std::future::pending()).await
    }

    /// The graceful stop, in the steps of `shutdown.rs`: stop accepting
    /// (the listener is closed), end parked POP WAITs with zero rows, close
    /// each session with 57P01 at its next idle point; sessions inside a
    /// transaction block (or running a statement) get until the shutdown
    /// timeout, or until `hurry` resolves (a second SIGTERM), then their
    /// statements are cancelled and they are closed with 57P01 (their
    /// transactions rolled back). Then the background loops stop, then the
    /// embedded cluster, if any.
    pub async fn drain(mut self, hurry: impl std::future::Future<Output = ()>) -> DrainReport {
        let mut report = DrainReport::default();
        let at_start = self.slots.live();
        self.shutdown.begin_drain();
        let _ = (&mut self.listener_task).await;
        tracing::info!(
            sessions = at_start,
            timeout = ?self.shutdown_timeout,
            "draining: no new clients; sessions close when idle"
        );
        let slots = self.slots.clone();
        let all_gone = |within: std::time::Duration| {
            let slots = slots.clone();
            async move {
                let deadline = tokio::time::Instant::now() + within;
                while slots.live() > 0 && tokio::time::Instant::now() < deadline {
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
                slots.live()
            }
        };
        let (left, why) = tokio::select! {
            left = all_gone(self.shutdown_timeout) => (left, "drain timeout"),
            () = hurry => (self.slots.live(), "stopping at once"),
        };
        if left > 0 {
            tracing::warn!(
                sessions = left,
                "{why}: closing the sessions left, rolling back their transactions"
            );
            self.shutdown.terminate();
            self.shared.cancel_statements().await;
            report.abandoned = all_gone(TERMINATE_GRACE).await;
        }
        report.terminated = left.saturating_sub(report.abandoned);
        report.drained = at_start.saturating_sub(left);
        // Claims held for sessions that are gone (fusion/hold.rs), before
        // the pool's connections go.
        self.shared.engine.fuser.give_back_all().await;
        self.shutdown.begin();
        for task in self.background_tasks.drain(..) {
            let _ = task.await;
        }
        self.shared.engine.ephemeral.stopped().await;
        if let Some(mut pg) = self.embedded.take() {
            let _ = tokio::task::spawn_blocking(move || pg.stop()).await;
        }
        tracing::info!(?report, "stopped");
        report
    }
}
