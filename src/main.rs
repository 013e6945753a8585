use clap::{Parser, Subcommand};
use queenwire::server::{Backend, Config, Server};
use queenwire::users::{Passthrough, User, Users, Verifier};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

/// queenwire: Queen's message queues and key/value store as SQL, over the
/// PostgreSQL wire protocol. Serves until SIGINT or SIGTERM (then drains:
/// see --shutdown-timeout); SIGHUP reloads the users file and certificate.
#[derive(Parser, Debug)]
#[command(version, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    serve: ServeArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Manage the users file (SCRAM-SHA-256 verifiers, never passwords).
    User {
        #[command(subcommand)]
        action: UserAction,
    },
}

#[derive(Subcommand, Debug)]
enum UserAction {
    /// Adds a user or replaces its password, tenant and policy. The password
    /// is read from a prompt, or as one line of standard input when that is
    /// not a terminal.
    Add {
        name: String,
        #[arg(long)]
        file: PathBuf,
        /// The tenant (UUID) the user acts in.
        #[arg(long, default_value = "00000000-0000-0000-0000-000000000001")]
        tenant: uuid::Uuid,
        /// What plain SQL the user may run: none, read_only or full.
        #[arg(long, default_value = "none")]
        passthrough: String,
        /// May run PURGE TENANT (`admin = true` in the file).
        #[arg(long)]
        admin: bool,
    },
    /// Lists the users of a users file.
    List {
        #[arg(long)]
        file: PathBuf,
    },
}

#[derive(clap::Args, Debug)]
struct ServeArgs {
    /// Address to listen on for PostgreSQL clients.
    #[arg(long, env = "QUEENWIRE_LISTEN", default_value = "127.0.0.1:6543")]
    listen: String,
    /// Also listen on a Unix socket in this directory, named
    /// `.s.PGSQL.<port>` after the TCP port (`psql -h DIR -p PORT`).
    #[arg(long, env = "QUEENWIRE_UNIX_SOCKET_DIR")]
    unix_socket_dir: Option<PathBuf>,
    /// PostgreSQL (15+) to use, as a URL or key=value string. Also read from
    /// DATABASE_URL. Absent: run an embedded PostgreSQL in --data-dir.
    #[arg(long, env = "QUEENWIRE_BACKEND")]
    backend: Option<String>,
    /// Data directory of the embedded PostgreSQL (created on first start).
    #[arg(long, env = "QUEENWIRE_DATA_DIR", default_value = "./queenwire-data")]
    data_dir: PathBuf,
    /// Backend connections in the pool (transaction pooling).
    #[arg(long, env = "QUEENWIRE_POOL_SIZE", default_value_t = 16)]
    pool_size: usize,
    /// Threads serving clients and the engine. Absent: half the cores, at
    /// least one (the rest is PostgreSQL's and the kernel's network work;
    /// on two cores one thread relayed and pushed faster than two: no
    /// wake-ups across threads)
    #[arg(long, env = "QUEENWIRE_WORKER_THREADS", value_parser = clap::value_parser!(u16).range(1..))]
    worker_threads: Option<u16>,
    /// Log level: error, warn, info, debug or trace (or a tracing filter).
    #[arg(long, env = "QUEENWIRE_LOG_LEVEL", default_value = "info")]
    log_level: String,
    /// Users file (TOML, SCRAM-SHA-256 verifiers; see `queenwire user add`).
    /// Absent: only loopback clients, trusted, and only a loopback --listen.
    #[arg(long, env = "QUEENWIRE_USERS")]
    users: Option<PathBuf>,
    /// Largest message a client may send, in bytes.
    #[arg(long, env = "QUEENWIRE_MAX_MESSAGE_SIZE", default_value_t = 64 * 1024 * 1024)]
    max_message_size: usize,
    /// Largest message payload (or KV value) a statement accepts, in bytes.
    #[arg(long, env = "QUEENWIRE_MAX_PAYLOAD", default_value_t = 1024 * 1024)]
    max_payload: usize,
    /// Start with the KV surface paused (KV statements fail with 55000).
    /// At run time, SIGUSR1 pauses it and SIGUSR2 resumes it.
    #[arg(long, env = "QUEENWIRE_KV_PAUSED")]
    kv_paused: bool,
    /// PEM certificate (chain) for TLS with clients (with --tls-key).
    #[arg(long, env = "QUEENWIRE_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, env = "QUEENWIRE_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Refuse clients that do not use TLS.
    #[arg(long, env = "QUEENWIRE_REQUIRE_TLS", requires = "tls_cert")]
    require_tls: bool,
    /// Most client connections at once; more are refused with 53300.
    #[arg(long, env = "QUEENWIRE_MAX_CONNECTIONS", default_value_t = 1000)]
    max_connections: usize,
    /// Seconds a client has to finish startup and authentication before its
    /// socket is closed.
    #[arg(long, env = "QUEENWIRE_STARTUP_TIMEOUT", default_value_t = 10)]
    startup_timeout: u64,
    /// Seconds a client may stay idle inside a transaction block before it
    /// is disconnected (25P03) and its transaction rolled back; 0 = never.
    #[arg(
        long,
        env = "QUEENWIRE_IDLE_IN_TRANSACTION_TIMEOUT",
        default_value_t = 600
    )]
    idle_in_transaction_timeout: u64,
    /// Seconds a statement waits for a free backend connection (every one
    /// held by other sessions' transactions) before it fails with 53300;
    /// 0 = wait as long as it takes
    #[arg(long, env = "QUEENWIRE_POOL_WAIT_TIMEOUT", default_value_t = 120)]
    pool_wait_timeout: u64,
    /// How client sessions share backend connections: `transaction` (a
    /// connection per transaction, given back when idle) or `session` (one
    /// connection for a client's whole session, for backend-local state such
    /// as currval, session advisory locks or per-backend C state; see
    /// docs/running.md).
    #[arg(long, env = "QUEENWIRE_POOL_MODE", default_value = "transaction", value_parser = parse_pool_mode)]
    pool_mode: queenwire::frontend::PoolMode,
    /// Apply the schema (`sql/`) at boot; 0 skips it, for a role that may
    /// not change the schema (see docs/security.md).
    #[arg(
        long,
        env = "QUEEN_APPLY_SCHEMA",
        default_value = "1",
        value_name = "0|1",
        value_parser = parse_apply_schema,
        action = clap::ArgAction::Set
    )]
    apply_schema: bool,
    /// Seconds between two passes of retention and of partition cleanup
    /// (run by one elected queenwire per cycle; what is due comes from the
    /// queues' retention options).
    #[arg(long, env = "QUEENWIRE_RETENTION_INTERVAL", default_value_t = 30)]
    retention_interval: u64,
    /// Seconds an empty partition must have been idle (created and last
    /// written that long ago) before cleanup deletes it; never while it
    /// holds DLQ rows.
    #[arg(long, env = "QUEENWIRE_PARTITION_CLEANUP_AGE", default_value_t = 7 * 24 * 3600)]
    partition_cleanup_age: u64,
    /// Seconds a SIGTERM / SIGINT drain waits for open transactions and
    /// running statements before it closes their sessions (57P01) and rolls
    /// them back; idle sessions close at once. A second signal skips the wait.
    #[arg(long, env = "QUEENWIRE_SHUTDOWN_TIMEOUT", default_value_t = 30)]
    shutdown_timeout: u64,
    /// Serve Prometheus metrics (/metrics), /health and /ready over HTTP on
    /// this address (e.g. 127.0.0.1:9187). Off when absent.
    #[arg(long, env = "QUEENWIRE_METRICS_LISTEN")]
    metrics_listen: Option<String>,
    /// Distinct queues with per-queue metric series; later queues share the
    /// series labelled queue="other".
    #[arg(long, env = "QUEENWIRE_METRICS_QUEUE_CAP", default_value_t = queenwire::metrics::DEFAULT_QUEUE_CAP)]
    metrics_queue_cap: usize,
    /// Log line format on standard error: text or json (one object a line
    /// with timestamp, level, target, message and the event's fields).
    #[arg(long, env = "QUEENWIRE_LOG_FORMAT", default_value = "text", value_parser = queenwire::metrics::log::LogFormat::parse)]
    log_format: queenwire::metrics::log::LogFormat,
    /// Payload encryption keys, one `key_id hex-32-bytes` a line, the first
    /// current (docs/security.md); mode 600. SIGHUP reloads it.
    #[arg(long, env = "QUEENWIRE_ENCRYPTION_KEY_FILE")]
    encryption_key_file: Option<PathBuf>,
    /// Where other queenwires forward statements on the ephemeral queues
    /// this one owns (authenticated by a secret kept in the database).
    /// Default: the --listen IP address, a port the system picks.
    #[arg(long, env = "QUEENWIRE_INTERNAL_LISTEN")]
    internal_listen: Option<String>,
    /// The host:port other queenwires reach --internal-listen at, when it
    /// differs from the address bound (NAT, several hosts with 0.0.0.0).
    #[arg(long, env = "QUEENWIRE_INTERNAL_ADVERTISE")]
    internal_advertise: Option<String>,
}

fn parse_pool_mode(value: &str) -> Result<queenwire::frontend::PoolMode, String> {
    match value.to_ascii_lowercase().as_str() {
        "transaction" => Ok(queenwire::frontend::PoolMode::Transaction),
        "session" => Ok(queenwire::frontend::PoolMode::Session),
        other => Err(format!(
            "unknown pool mode {other:?}: transaction or session"
        )),
    }
}

/// Any value but `0` applies the schema.
fn parse_apply_schema(value: &str) -> Result<bool, std::convert::Infallible> {
    Ok(value != "0")
}

/// jemalloc instead of glibc's malloc: a POP or ACK allocates and frees
/// many small buffers a message (rows, receipts, decoded frames) beside a
/// few large ones a call, and glibc's allocator spent a fifth of
/// queenwire's CPU in popack100 on them (`_int_malloc`, `_int_free`,
/// `malloc_consolidate`, `unlink_chunk`). Measured: queenwire's CPU a
/// message about 15 % lower against PostgreSQL's in the same run; mimalloc and
/// glibc's tunables showed no difference.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(Command::User { action }) = cli.command {
        return match manage_users(action) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("queenwire: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let cli = cli.serve;
    let users = match &cli.users {
        Some(path) if !path.exists() => {
            eprintln!(
                "queenwire: users file {} does not exist (create it with `queenwire user add`)",
                path.display()
            );
            return ExitCode::FAILURE;
        }
        Some(path) => match Users::load(path) {
            Ok(u) if u.users.is_empty() => {
                eprintln!("queenwire: users file {} has no users", path.display());
                return ExitCode::FAILURE;
            }
            Ok(u) => Some(Arc::new(u)),
            Err(e) => {
                eprintln!("queenwire: {e}");
                return ExitCode::FAILURE;
            }
        },
        None => None,
    };
    let filter = match log_filter(&cli.log_level) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("queenwire: {e}");
            return ExitCode::from(2);
        }
    };
    // Logs go to standard error, leaving standard output to `user list`;
    // colours only on a terminal, not in a file or the journal.
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match cli.log_format {
        queenwire::metrics::log::LogFormat::Text => logs.init(),
        // One object a line: timestamp, level, the event's fields (its
        // message among them) and target, without span context.
        queenwire::metrics::log::LogFormat::Json => logs
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .init(),
    }

    let backend = match cli.backend.or_else(|| std::env::var("DATABASE_URL").ok()) {
        Some(url) => match url.parse::<tokio_postgres::Config>() {
            Ok(cfg) => Backend::External(Box::new(cfg)),
            Err(e) => {
                eprintln!("queenwire: invalid --backend: {e}");
                return ExitCode::from(2);
            }
        },
        None => Backend::Embedded {
            data_dir: cli.data_dir,
        },
    };
    let sealing = match queenwire::engine::sealing::Sealing::load(cli.encryption_key_file) {
        Ok(s) => std::sync::Arc::new(s),
        Err(e) => {
            eprintln!("queenwire: {e}");
            return ExitCode::from(2);
        }
    };
    let config = Config {
        listen: cli.listen,
        unix_socket_dir: cli.unix_socket_dir,
        backend,
        pool_size: cli.pool_size.max(1),
        users,
        users_path: cli.users,
        shutdown_timeout: std::time::Duration::from_secs(cli.shutdown_timeout),
        apply_schema: cli.apply_schema,
        max_message_size: cli.max_message_size,
        max_payload: cli.max_payload,
        kv_paused: cli.kv_paused,
        tls: match (cli.tls_cert, cli.tls_key) {
            (Some(cert), Some(key)) => Some(queenwire::server::TlsFiles { cert, key }),
            _ => None,
        },
        require_tls: cli.require_tls,
        max_connections: cli.max_connections.max(1),
        startup_timeout: std::time::Duration::from_secs(cli.startup_timeout.max(1)),
        idle_in_transaction_timeout: (cli.idle_in_transaction_timeout > 0)
            .then(|| std::time::Duration::from_secs(cli.idle_in_transaction_timeout)),
        pool_wait_timeout: (cli.pool_wait_timeout > 0)
            .then(|| std::time::Duration::from_secs(cli.pool_wait_timeout)),
        pool_mode: cli.pool_mode,
        retention: queenwire::engine::retention::RetentionSettings {
            interval: std::time::Duration::from_secs(cli.retention_interval.max(1)),
            cleanup_age: std::time::Duration::from_secs(cli.partition_cleanup_age),
        },
        metrics_listen: cli.metrics_listen,
        metrics_queue_cap: cli.metrics_queue_cap,
        metrics_flush_interval: queenwire::metrics::flush::FLUSH_INTERVAL,
        sealing,
        internal: queenwire::engine::ephemeral::Internal {
            listen: cli.internal_listen,
            advertise: cli.internal_advertise,
        },
    };
    let threads = cli.worker_threads.map(usize::from).unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1))
    });
    // One thread: the scheduler without work stealing, whose wake-ups stay
    // on the thread that runs everything.
    let mut runtime = if threads == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(threads);
        b
    };
    let runtime = match runtime.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("queenwire: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let auth = match &config.users {
        Some(users) => format!("{} users, SCRAM-SHA-256", users.users.len()),
        None => "no users file: loopback clients only, trusted".to_string(),
    };
    runtime.block_on(async move {
        let server = match Server::start(config).await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("queenwire: {e}");
                return ExitCode::FAILURE;
            }
        };
        tracing::info!(
            "queenwire listening on {}, backend: {}, clients: {auth}, {threads} worker thread(s)",
            server.local_addr,
            server.backend_description
        );
        if let Some(path) = &server.unix_socket {
            tracing::info!("also listening on the Unix socket {}", path.display());
        }
        if let Some(addr) = server.metrics_addr {
            tracing::info!("metrics on http://{addr}/metrics (/health, /ready)");
        }
        let Some(mut signals) = Signals::new() else {
            let _ = tokio::signal::ctrl_c().await;
            server.shutdown().await;
            return ExitCode::SUCCESS;
        };
        let backend_died = loop {
            let signal = tokio::select! {
                signal = signals.next() => signal,
                () = server.embedded_exited() => break true,
            };
            match signal {
                Signal::Stop => break false,
                Signal::Kv(paused) => {
                    server.set_kv_paused(paused);
                    tracing::info!(paused, "KV surface switched");
                }
                // Errors are logged by the reload; the old files stay.
                Signal::Reload => drop(server.reload().await),
            }
        };
        if backend_died {
            // Nothing can be served: the sessions close at once.
            server.drain(std::future::ready(())).await;
            return ExitCode::FAILURE;
        }
        tracing::info!("shutting down (a second SIGTERM or SIGINT skips the wait)");
        let hurry = async move { while !matches!(signals.next().await, Signal::Stop) {} };
        server.drain(hurry).await;
        ExitCode::SUCCESS
    })
}

fn manage_users(action: UserAction) -> Result<(), String> {
    match action {
        UserAction::Add {
            name,
            file,
            tenant,
            passthrough,
            admin,
        } => {
            let passthrough = Passthrough::parse(&passthrough)
                .ok_or("--passthrough must be none, read_only or full")?;
            if name.is_empty() || name.len() > 63 || name.contains('\0') {
                return Err("a user name is 1 to 63 bytes without NUL".into());
            }
            let password = read_password()?;
            let mut users = Users::load(&file).map_err(|e| e.to_string())?;
            users.users.insert(
                name.clone(),
                User {
                    name: name.clone(),
                    tenant,
                    passthrough,
                    verifier: Verifier::new(&password),
                },
            );
            if admin {
                users.admins.insert(name.clone());
            } else {
                users.admins.remove(&name);
            }
            users.save(&file).map_err(|e| e.to_string())?;
            eprintln!("queenwire: user {name} saved in {}", file.display());
            Ok(())
        }
        UserAction::List { file } => {
            let users = Users::load(&file).map_err(|e| e.to_string())?;
            for u in users.users.values() {
                println!(
                    "{}\ttenant={}\tpassthrough={}\tbackend_role={}{}",
                    u.name,
                    u.tenant,
                    u.passthrough.as_str(),
                    u.backend_role().as_deref().unwrap_or("-"),
                    if users.admins.contains(&u.name) {
                        "\tadmin"
                    } else {
                        ""
                    }
                );
            }
            Ok(())
        }
    }
}

/// A password from a prompt without echo, or one line of standard input.
fn read_password() -> Result<String, String> {
    use std::io::BufRead;
    let tty = unsafe { libc::isatty(0) } == 1;
    let mut line = String::new();
    if tty {
        eprint!("Password: ");
        let echo = EchoOff::new();
        std::io::stdin()
            .lock()
            .read_line(&mut line)
            .map_err(|e| e.to_string())?;
        drop(echo);
        eprintln!();
    } else {
        std::io::stdin()
            .lock()
            .read_line(&mut line)
            .map_err(|e| e.to_string())?;
    }
    let password = line.trim_end_matches(['\n', '\r']).to_string();
    if password.is_empty() {
        return Err("empty password".into());
    }
    Ok(password)
}

/// Turns terminal echo off until dropped.
struct EchoOff(Option<libc::termios>);

impl EchoOff {
    fn new() -> EchoOff {
        let mut t: libc::termios = unsafe { std::mem::zeroed() };
        if unsafe { libc::tcgetattr(0, &mut t) } != 0 {
            return EchoOff(None);
        }
        let saved = t;
        t.c_lflag &= !libc::ECHO;
        unsafe { libc::tcsetattr(0, libc::TCSANOW, &t) };
        EchoOff(Some(saved))
    }
}

impl Drop for EchoOff {
    fn drop(&mut self) {
        if let Some(t) = self.0 {
            unsafe { libc::tcsetattr(0, libc::TCSANOW, &t) };
        }
    }
}

/// `--log-level`: a level (`warning` read as `warn`), or a tracing filter
/// with directives (`queenwire=debug,info`). A bare word that is not a
/// level is refused: as a filter it would name a target and silence
/// everything else, errors included.
fn log_filter(level: &str) -> Result<tracing_subscriber::EnvFilter, String> {
    let word = level.trim().to_ascii_lowercase();
    let word = if word == "warning" {
        "warn".to_string()
    } else {
        word
    };
    let is_level = matches!(
        word.as_str(),
        "off" | "error" | "warn" | "info" | "debug" | "trace"
    );
    if !is_level && !word.contains(['=', ',']) {
        return Err(format!(
            "invalid --log-level {level:?}: give error, warn, info, debug or trace, or a filter such as queenwire=debug,info"
        ));
    }
    tracing_subscriber::EnvFilter::try_new(&word)
        .map_err(|e| format!("invalid --log-level {level:?}: {e}"))
}

/// What a signal asks for.
enum Signal {
    /// SIGTERM or SIGINT: drain and exit.
    Stop,
    /// SIGUSR1 / SIGUSR2: pause / resume the KV surface.
    Kv(bool),
    /// SIGHUP: reload the users file, the TLS certificate and key and the
    /// encryption keys.
    Reload,
}

struct Signals([tokio::signal::unix::Signal; 5]);

impl Signals {
    fn new() -> Option<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Some(Signals([
            signal(SignalKind::terminate()).ok()?,
            signal(SignalKind::interrupt()).ok()?,
            signal(SignalKind::user_defined1()).ok()?,
            signal(SignalKind::user_defined2()).ok()?,
            signal(SignalKind::hangup()).ok()?,
        ]))
    }

    async fn next(&mut self) -> Signal {
        let [term, int, usr1, usr2, hup] = &mut self.0;
        tokio::select! {
            _ = term.recv() => Signal::Stop,
            _ = int.recv() => Signal::Stop,
            _ = usr1.recv() => Signal::Kv(true),
            _ = usr2.recv() => Signal::Kv(false),
            _ = hup.recv() => Signal::Reload,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_level_is_a_level_or_a_filter() {
        for ok in [
            "info",
            "WARN",
            "warning",
            "error",
            "trace",
            "queenwire=debug,info",
        ] {
            assert!(log_filter(ok).is_ok(), "{ok}");
        }
        for bad in ["bogus", "warnings", ""] {
            assert!(log_filter(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_command_line_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn retention_defaults_match_the_engine_defaults() {
        let cli = Cli::try_parse_from(["queenwire"]).unwrap();
        let engine = queenwire::engine::retention::RetentionSettings::default();
        assert_eq!(cli.serve.retention_interval, engine.interval.as_secs());
        assert_eq!(
            cli.serve.partition_cleanup_age,
            engine.cleanup_age.as_secs()
        );
    }

    #[test]
    fn apply_schema_is_off_only_for_0() {
        for (value, applies) in [("0", false), ("1", true), ("yes", true)] {
            let cli = Cli::try_parse_from(["queenwire", "--apply-schema", value]).unwrap();
            assert_eq!(cli.serve.apply_schema, applies, "--apply-schema {value}");
        }
    }
}
