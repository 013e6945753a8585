//! The systems under test: one embedded PostgreSQL (fresh data directory),
//! the release `queenwire` binary as a separate process in front of it, and
//! pgmq's SQL installed into the same database.

use queenwire::embedded::EmbeddedPostgres;
use std::fs;
use std::net::{SocketAddr, TcpListener};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio_postgres::{Client, Config, NoTls};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

pub struct Cluster {
    pub pg: EmbeddedPostgres,
    pub dir: PathBuf,
    pub version: String,
}

/// A fresh data directory under /tmp (mode 0755: run as root, PostgreSQL
/// runs as `postgres`, which must be able to traverse it).
pub async fn start_cluster() -> Result<Cluster, BoxError> {
    let dir = PathBuf::from(format!("/tmp/qwbench-{}", std::process::id()));
    if dir.exists() {
        fs::remove_dir_all(&dir)?;
    }
    fs::create_dir_all(&dir)?;
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755))?;
    let d = dir.clone();
    // Also on 127.0.0.1, for the direct-over-TCP comparison.
    let tcp_port = free_port()?;
    let pg =
        tokio::task::spawn_blocking(move || EmbeddedPostgres::start_listening(&d, Some(tcp_port)))
            .await??;
    let client = connect(&pg.client_config()).await?;
    let version: String = client
        .query_one("SELECT current_setting('server_version')", &[])
        .await?
        .get(0);
    let sync: String = client
        .query_one("SELECT current_setting('synchronous_commit')", &[])
        .await?
        .get(0);
    if sync != "on" {
        return Err(format!("synchronous_commit is {sync}, the benchmark needs on").into());
    }
    Ok(Cluster { pg, dir, version })
}

impl Cluster {
    /// `key=value` connection string of the cluster over `transport`.
    pub fn conninfo(&self, transport: crate::Transport) -> String {
        let host = match transport {
            crate::Transport::Tcp => "127.0.0.1".to_string(),
            crate::Transport::Unix => self.pg.socket_dir().display().to_string(),
        };
        format!(
            "host={host} port={} user={} dbname={}",
            self.pg.port(),
            self.pg.user(),
            self.pg.database()
        )
    }

    /// The cluster over TCP on 127.0.0.1 (same user and database).
    pub fn tcp_config(&self) -> Config {
        let mut cfg = Config::new();
        cfg.host("127.0.0.1")
            .port(self.pg.port())
            .user(self.pg.user())
            .dbname(self.pg.database());
        cfg
    }

    pub fn stop(mut self, keep: bool) {
        let _ = self.pg.stop();
        if !keep {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// A loopback port nobody listens on now.
pub fn free_port() -> Result<u16, BoxError> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

pub async fn connect(cfg: &Config) -> Result<Client, tokio_postgres::Error> {
    let (client, conn) = cfg.connect(NoTls).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client)
}

pub struct Proxy {
    pub child: tokio::process::Child,
    pub pid: u32,
    pub addr: SocketAddr,
    /// The directory of its Unix socket (`.s.PGSQL.<port>`).
    pub socket_dir: PathBuf,
    pub log: PathBuf,
}

impl Proxy {
    pub fn client_config(&self) -> Config {
        let mut cfg = Config::new();
        cfg.host(self.addr.ip().to_string())
            .port(self.addr.port())
            .user("bench")
            .dbname("postgres")
            .connect_timeout(Duration::from_secs(10));
        cfg
    }

    /// The same login over queenwire's Unix socket.
    pub fn unix_client_config(&self) -> Config {
        let mut cfg = Config::new();
        cfg.host_path(&self.socket_dir)
            .port(self.addr.port())
            .user("bench")
            .dbname("postgres")
            .connect_timeout(Duration::from_secs(10));
        cfg
    }

    /// Peak resident set size so far (VmHWM), in MB.
    pub fn peak_rss_mb(&self) -> Option<f64> {
        crate::procfs::status_kb(self.pid, "VmHWM").map(|kb| kb as f64 / 1024.0)
    }

    pub async fn stop(mut self) {
        // SIGTERM: queenwire drains and exits.
        // SAFETY: kill on our own child's pid.
        unsafe {
            libc::kill(self.pid as i32, libc::SIGTERM);
        }
        if tokio::time::timeout(Duration::from_secs(15), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

/// The release `queenwire` binary: `--queenwire PATH`, else the one next to
/// this program, built (or confirmed up to date) first when run by cargo.
pub fn queenwire_binary(explicit: Option<&Path>) -> Result<PathBuf, BoxError> {
    if let Some(p) = explicit {
        return Ok(p.to_path_buf());
    }
    let exe = std::env::current_exe()?;
    let profile_dir = exe
        .parent()
        .ok_or("no directory for the benchmark binary")?;
    let candidate = profile_dir.join("queenwire");
    if let (Ok(cargo), Some(target_dir)) = (std::env::var("CARGO"), profile_dir.parent()) {
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .ok_or("no workspace")?;
        eprintln!(
            "bench: building the queenwire binary (cargo build --release -p queenwire) into {}",
            target_dir.display()
        );
        let mut cmd = std::process::Command::new(cargo);
        cmd.args([
            "build",
            "--release",
            "-p",
            "queenwire",
            "--bin",
            "queenwire",
        ])
        .current_dir(workspace)
        .env("CARGO_TARGET_DIR", target_dir)
        .stdin(Stdio::null());
        let mut child = cmd.spawn()?;
        let started = Instant::now();
        loop {
            if let Some(status) = child.try_wait()? {
                if !status.success() {
                    if candidate.exists() {
                        eprintln!(
                            "bench: WARNING: building queenwire failed ({status}); using the existing {}",
                            candidate.display()
                        );
                    } else {
                        return Err(format!("building queenwire failed ({status})").into());
                    }
                }
                break;
            }
            if started.elapsed() > Duration::from_secs(900) {
                let _ = child.kill();
                return Err("building queenwire took more than 15 minutes".into());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    if candidate.exists() {
        Ok(candidate)
    } else {
        Err(format!(
            "no queenwire binary at {}: build it with `cargo build --release -p queenwire` (same target directory) or pass --queenwire PATH",
            candidate.display()
        )
        .into())
    }
}

/// Starts the proxy on a free loopback port and waits until it answers.
/// `extra` is appended to its arguments; with `raise_nofile` its soft
/// RLIMIT_NOFILE is raised to the hard limit before exec (queenwire does not
/// raise its own, and an idle client costs it one descriptor).
pub async fn start_proxy(
    binary: &Path,
    backend: &str,
    pool_size: usize,
    log_dir: &Path,
    extra: &[String],
    raise_nofile: bool,
) -> Result<Proxy, BoxError> {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0")?;
        l.local_addr()?.port()
    };
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
    let log = log_dir.join("queenwire.log");
    let log_file = fs::File::create(&log)?;
    let socket_dir = log_dir.join("qwsocket");
    fs::create_dir_all(&socket_dir)?;
    let mut command = tokio::process::Command::new(binary);
    // Its own process group, so a Ctrl-C reaches only the benchmark, which
    // then stops it; and SIGTERM if the benchmark dies without doing so.
    command.process_group(0);
    // SAFETY: prctl, getrlimit and setrlimit are async-signal-safe; nothing
    // else runs in the child between fork and exec.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if raise_nofile {
                let mut lim: libc::rlimit = std::mem::zeroed();
                if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
                    lim.rlim_cur = lim.rlim_max;
                    libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
                }
            }
            Ok(())
        });
    }
    let child = command
        .arg("--backend")
        .arg(backend)
        .arg("--listen")
        .arg(addr.to_string())
        .arg("--unix-socket-dir")
        .arg(&socket_dir)
        .arg("--pool-size")
        .arg(pool_size.to_string())
        .arg("--log-level")
        .arg("warn")
        .args(extra)
        .stdin(Stdio::null())
        .stdout(log_file.try_clone()?)
        .stderr(log_file)
        .kill_on_drop(true)
        .spawn()?;
    let pid = child.id().ok_or("queenwire exited at once")?;
    let mut proxy = Proxy {
        child,
        pid,
        addr,
        socket_dir,
        log,
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = proxy.child.try_wait()? {
            let tail = fs::read_to_string(&proxy.log).unwrap_or_default();
            return Err(format!("queenwire exited ({status}):\n{tail}").into());
        }
        let cfg = proxy.client_config();
        if let Ok(Ok(client)) = tokio::time::timeout(Duration::from_secs(5), connect(&cfg)).await {
            if client.simple_query("SELECT 1").await.is_ok() {
                return Ok(proxy);
            }
        }
        if Instant::now() > deadline {
            return Err("queenwire did not accept connections within 60 s".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Installs pgmq's SQL (the crate's embedded scripts) into the cluster's
/// database; returns the installed version.
pub async fn install_pgmq(cluster: &Cluster) -> Result<String, BoxError> {
    use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
    let options = PgConnectOptions::new()
        .socket(cluster.pg.socket_dir())
        .port(cluster.pg.port())
        .username(cluster.pg.user())
        .database(cluster.pg.database());
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(30))
        .connect_with(options)
        .await?;
    tokio::time::timeout(
        Duration::from_secs(120),
        pgmq::install::install_sql_from_embedded(&pool),
    )
    .await
    .map_err(|_| "pgmq install took more than 120 s")??;
    let version = pgmq::install::installed_version(&pool)
        .await?
        .map_or_else(|| "unknown".to_string(), |v| v.to_string());
    pool.close().await;
    Ok(version)
}

/// The table of the plain-INSERT baseline: what a hand-rolled queue table
/// looks like at its simplest (an id, a partition key and a jsonb payload).
pub async fn create_insert_table(client: &Client) -> Result<(), tokio_postgres::Error> {
    client
        .batch_execute(
            "DROP TABLE IF EXISTS bench_insert; \
             CREATE TABLE bench_insert (id BIGSERIAL PRIMARY KEY, part TEXT, payload JSONB NOT NULL)",
        )
        .await
}

/// An error with PostgreSQL's code, message and detail when it has them
/// (tokio-postgres's Display says only "db error").
pub fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(pg) = err.downcast_ref::<tokio_postgres::Error>() {
            if let Some(db) = pg.as_db_error() {
                let mut s = format!("{} {}", db.code().code(), db.message());
                if let Some(d) = db.detail() {
                    s.push_str(&format!(" ({d})"));
                }
                return s;
            }
        }
        cur = err.source();
    }
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(&format!(": {inner}"));
        src = inner.source();
    }
    s
}

/// pgbench's `-h HOST -p PORT -U USER DBNAME` for a client config.
pub fn libpq_args(cfg: &Config) -> Result<Vec<String>, BoxError> {
    let host = match cfg.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        Some(tokio_postgres::config::Host::Unix(dir)) => dir.display().to_string(),
        None => return Err("a client config without a host".into()),
    };
    let port = cfg.get_ports().first().copied().unwrap_or(5432);
    Ok(vec![
        "-h".into(),
        host,
        "-p".into(),
        port.to_string(),
        "-U".into(),
        cfg.get_user().unwrap_or("postgres").to_string(),
        cfg.get_dbname().unwrap_or("postgres").to_string(),
    ])
}
