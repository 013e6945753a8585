use clap::Parser;
use queenwire::server::{Backend, Config, Server};
use std::path::PathBuf;
use std::process::ExitCode;

/// queenwire: Queen's message queues and key/value store as SQL, over the
/// PostgreSQL wire protocol. Serves until SIGINT or SIGTERM.
#[derive(Parser, Debug)]
#[command(version)]
struct Cli {
    /// Address to listen on for PostgreSQL clients.
    #[arg(long, env = "QUEENWIRE_LISTEN", default_value = "127.0.0.1:6543")]
    listen: String,
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
    /// Log level: error, warn, info, debug or trace (or a tracing filter).
    #[arg(long, env = "QUEENWIRE_LOG_LEVEL", default_value = "info")]
    log_level: String,
    /// Password every client must give (cleartext password authentication).
    /// Absent: clients are trusted.
    #[arg(long, env = "QUEENWIRE_PASSWORD", hide_env_values = true)]
    password: Option<String>,
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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_new(&cli.log_level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt().with_env_filter(filter).init();

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
    let config = Config {
        listen: cli.listen,
        backend,
        pool_size: cli.pool_size.max(1),
        password: cli.password,
        apply_schema: std::env::var("QUEEN_APPLY_SCHEMA").map_or(true, |v| v != "0"),
        max_message_size: cli.max_message_size,
        max_payload: cli.max_payload,
        kv_paused: cli.kv_paused,
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("queenwire: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
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
            "queenwire listening on {}, backend: {}",
            server.local_addr,
            server.backend_description
        );
        let kv = server.kv_state();
        wait_for_signal(move |paused| {
            kv.set_paused(paused);
            tracing::info!(paused, "KV surface switched");
        })
        .await;
        tracing::info!("shutting down");
        server.shutdown().await;
        ExitCode::SUCCESS
    })
}

/// Waits for SIGINT or SIGTERM; SIGUSR1 / SIGUSR2 pause / resume the KV
/// surface meanwhile.
async fn wait_for_signal(kv_switch: impl Fn(bool)) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int), Ok(mut usr1), Ok(mut usr2)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::user_defined1()),
        signal(SignalKind::user_defined2()),
    ) else {
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    loop {
        tokio::select! {
            _ = term.recv() => return,
            _ = int.recv() => return,
            _ = usr1.recv() => kv_switch(true),
            _ = usr2.recv() => kv_switch(false),
        }
    }
}
