//! The pgbench mode (`--pgbench`): the headline cells run by pgbench, the
//! tool a PostgreSQL user reruns a claim with, from the scripts in
//! bench/pgbench/ (copy them; each says how to run it). Every system is
//! driven by the same pgbench, over the same transport, 8 clients and 2
//! threads, rounds alternating across systems, in `-M simple` and
//! `-M prepared` (and `-M extended` for `SELECT 1`). PgBouncer runs beside
//! queenwire for `SELECT 1` and TPC-B: transaction pooling, the same pool
//! size, in front of the same cluster over the same transport.
//!
//! The native cells the pgbench cells stand for run in the same process
//! (see `main.rs`): where a native ratio and its pgbench twin disagree by
//! more than 15 % the report says so.

use crate::procfs;
use crate::runner::median;
use crate::setup::{self, BoxError};
use crate::{Bench, Transport};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio_postgres::Config;

/// Clients and threads of every pgbench run (pgbench's `-c` and `-j`).
pub const CLIENTS: usize = 8;
const THREADS: usize = 2;
/// Transactions per client of a POP run (`-t`): the queue holds twice what
/// the run takes, so no POP comes back short.
const POP_TXNS: u64 = 150;
/// pgbench's scale factor for TPC-B (1,000,000 accounts).
pub const TPCB_SCALE: u32 = 10;

/// The scripts, as committed in bench/pgbench/.
const SCRIPTS: &[(&str, &str)] = &[
    ("qw_push1.sql", include_str!("../pgbench/qw_push1.sql")),
    (
        "qw_push1_100p.sql",
        include_str!("../pgbench/qw_push1_100p.sql"),
    ),
    (
        "qw_push1_100p_prepared.sql",
        include_str!("../pgbench/qw_push1_100p_prepared.sql"),
    ),
    ("qw_push100.sql", include_str!("../pgbench/qw_push100.sql")),
    ("qw_pop100.sql", include_str!("../pgbench/qw_pop100.sql")),
    ("pgmq_push1.sql", include_str!("../pgbench/pgmq_push1.sql")),
    (
        "pgmq_push100.sql",
        include_str!("../pgbench/pgmq_push100.sql"),
    ),
    (
        "pgmq_pop100.sql",
        include_str!("../pgbench/pgmq_pop100.sql"),
    ),
    (
        "insert_push1.sql",
        include_str!("../pgbench/insert_push1.sql"),
    ),
    (
        "insert_push1_100p.sql",
        include_str!("../pgbench/insert_push1_100p.sql"),
    ),
    (
        "insert_push100.sql",
        include_str!("../pgbench/insert_push100.sql"),
    ),
    ("select1.sql", include_str!("../pgbench/select1.sql")),
];

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Simple,
    Extended,
    Prepared,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Simple => "simple",
            Mode::Extended => "extended",
            Mode::Prepared => "prepared",
        }
    }
}

/// What one pgbench transaction runs.
#[derive(Clone, Copy)]
enum Script {
    /// A file of bench/pgbench/; the second name, when given, is the file
    /// for the extended and prepared modes.
    File(&'static str, Option<&'static str>),
    /// A script built into pgbench (`-b`).
    Builtin(&'static str),
}

/// One pgbench cell: the systems it compares and how each is driven.
struct PgCell {
    name: &'static str,
    /// (system, script); the first system is the one the ratios are of.
    systems: &'static [(&'static str, Script)],
    modes: &'static [Mode],
    /// Messages one transaction moves (1 for statements that are not
    /// queue operations).
    per_txn: u64,
    /// Runs a fixed number of transactions from a filled queue instead of
    /// a fixed time.
    drains: bool,
    /// The native cell (workload, queenwire system, other system) this one
    /// stands for.
    twin: Option<(&'static str, &'static str, &'static str)>,
}

/// The pgbench cells' names (for `--only`).
pub const CELL_NAMES: &[&str] = &[
    "push1",
    "push1_100p",
    "push100",
    "pop100",
    "select1",
    "tpcb",
];

/// Whether the native cell `workload` is a pgbench cell's `twin`.
pub fn is_twin(workload: &str) -> bool {
    CELLS
        .iter()
        .any(|c| c.twin.is_some_and(|(t, _, _)| t == workload))
}

const BOTH: &[Mode] = &[Mode::Simple, Mode::Prepared];

const CELLS: &[PgCell] = &[
    PgCell {
        name: "push1",
        systems: &[
            ("queenwire", Script::File("qw_push1.sql", None)),
            ("pgmq", Script::File("pgmq_push1.sql", None)),
            ("INSERT", Script::File("insert_push1.sql", None)),
        ],
        modes: BOTH,
        per_txn: 1,
        drains: false,
        twin: Some(("push1", "queenwire", "pgmq")),
    },
    PgCell {
        name: "push1_100p",
        systems: &[
            (
                "queenwire",
                Script::File("qw_push1_100p.sql", Some("qw_push1_100p_prepared.sql")),
            ),
            ("pgmq", Script::File("pgmq_push1.sql", None)),
            ("INSERT", Script::File("insert_push1_100p.sql", None)),
        ],
        modes: BOTH,
        per_txn: 1,
        drains: false,
        twin: Some(("push1_100p", "queenwire", "pgmq")),
    },
    PgCell {
        name: "push100",
        systems: &[
            ("queenwire", Script::File("qw_push100.sql", None)),
            ("pgmq", Script::File("pgmq_push100.sql", None)),
            ("INSERT", Script::File("insert_push100.sql", None)),
        ],
        modes: BOTH,
        per_txn: 100,
        drains: false,
        twin: Some(("push100", "queenwire", "pgmq")),
    },
    PgCell {
        name: "pop100",
        systems: &[
            ("queenwire", Script::File("qw_pop100.sql", None)),
            ("pgmq", Script::File("pgmq_pop100.sql", None)),
        ],
        modes: BOTH,
        per_txn: 100,
        drains: true,
        twin: Some(("autoack100", "queenwire 1000p", "pgmq")),
    },
    PgCell {
        name: "select1",
        systems: &[
            ("queenwire", Script::File("select1.sql", None)),
            ("direct", Script::File("select1.sql", None)),
            ("pgbouncer", Script::File("select1.sql", None)),
        ],
        modes: &[Mode::Simple, Mode::Extended, Mode::Prepared],
        per_txn: 1,
        drains: false,
        twin: Some(("select1", "queenwire", "direct")),
    },
    PgCell {
        name: "tpcb",
        systems: &[
            ("queenwire", Script::Builtin("tpcb-like")),
            ("direct", Script::Builtin("tpcb-like")),
            ("pgbouncer", Script::Builtin("tpcb-like")),
        ],
        modes: &[Mode::Simple],
        per_txn: 1,
        drains: false,
        twin: None,
    },
];

/// One pgbench run.
pub struct Run {
    pub cell: &'static str,
    pub mode: &'static str,
    pub system: &'static str,
    pub tps: f64,
    /// Messages one transaction moved: `per_txn` of the cell, or for a
    /// POP cell what left the queue over the transactions run.
    pub msgs_per_txn: f64,
    /// CPU µs per transaction: the cluster, queenwire, PgBouncer, pgbench.
    pub cpu_us: (f64, Option<f64>, Option<f64>, f64),
}

#[derive(Default)]
pub struct Results {
    pub runs: Vec<Run>,
    pub notes: Vec<String>,
    /// How every system was reached.
    pub transport: String,
    pub secs: u32,
    /// The push runs' queue of the moment (`pgb_push` in the scripts).
    queue: String,
}

/// A running PgBouncer, stopped on drop.
struct PgBouncer {
    child: tokio::process::Child,
    pid: u32,
    cfg: Config,
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        // SAFETY: a signal to our own child.
        unsafe {
            libc::kill(self.pid as i32, libc::SIGTERM);
        }
        let _ = self.child.start_kill();
    }
}

impl Bench {
    /// The pgbench cells (after the native ones, which `main.rs` runs).
    pub async fn pgbench_mode(&mut self, cluster: &setup::Cluster) -> Result<(), BoxError> {
        let Some(pgbench) = find_pgbench() else {
            self.pgbench
                .notes
                .push("no pgbench binary found: the pgbench cells did not run".into());
            return Ok(());
        };
        let dir = cluster.dir.join("pgbench");
        fs::create_dir_all(&dir)?;
        for (name, text) in SCRIPTS {
            fs::write(dir.join(name), text)?;
        }
        let secs = (self.args.secs * 3.0).round().max(2.0) as u32;
        self.pgbench.secs = secs;
        self.pgbench.transport = self.args.transport.name().into();
        let bouncer = match start_pgbouncer(cluster, self.args.transport, self.args.pool_size).await
        {
            Ok(b) => Some(b),
            Err(e) => {
                let why = format!("PgBouncer: {e}; its cells are skipped");
                eprintln!("bench: {why}");
                self.pgbench.notes.push(why);
                None
            }
        };
        for cell in CELLS {
            if let Some(only) = self.args.only.as_ref().filter(|_| self.args.only_given) {
                if !only.iter().any(|w| w == cell.name)
                    && !cell
                        .twin
                        .is_some_and(|(t, _, _)| only.iter().any(|w| w == t))
                {
                    continue;
                }
            }
            self.quiet_check(&format!("pgbench {}", cell.name)).await;
            if cell.name == "tpcb" {
                tpcb_init(&pgbench, &self.direct_cfg).await?;
            }
            if cell.drains {
                self.qw_admin
                    .simple_query("CREATE QUEUE IF NOT EXISTS pgb_pop")
                    .await?;
                self.pg_admin
                    .execute("SELECT pgmq.create('pgb_pop')", &[])
                    .await?;
                for k in ["qw:pgb_pop", "pgmq:pgb_pop"] {
                    self.levels.insert(k.into(), 0);
                }
            }
            for round in 0..self.args.rounds {
                for &mode in cell.modes {
                    for &(system, script) in cell.systems {
                        if !self.runs(system) {
                            continue;
                        }
                        let cfg = match system {
                            "queenwire" => self.proxy_cfg.clone(),
                            "pgbouncer" => match &bouncer {
                                // Transaction pooling cannot keep prepared
                                // statements (PgBouncer before 1.21).
                                Some(b) if mode != Mode::Prepared => b.cfg.clone(),
                                _ => continue,
                            },
                            _ => self.direct_cfg.clone(),
                        };
                        let length = if cell.drains {
                            let key = if system == "queenwire" {
                                "qw:pgb_pop"
                            } else {
                                "pgmq:pgb_pop"
                            };
                            // Twice what the run takes, as the native
                            // consume cells keep it: a queue drained to
                            // empty in every run is another shape (pgmq's
                            // index then starts each run behind the last
                            // run's dead rows).
                            let need = 2 * POP_TXNS * CLIENTS as u64 * cell.per_txn;
                            let level = self.levels[key];
                            if level < need {
                                self.prefill(key, need - level).await?;
                            }
                            Length::Txns(POP_TXNS)
                        } else {
                            self.pgbench_setup(cell.name, system).await?;
                            Length::Secs(secs)
                        };
                        let script_path = match script {
                            Script::File(simple, other) => {
                                let file = match (mode, other) {
                                    (Mode::Simple, _) | (_, None) => simple,
                                    (_, Some(other)) => other,
                                };
                                if cell.name.starts_with("push") {
                                    let text = SCRIPTS
                                        .iter()
                                        .find(|(n, _)| *n == file)
                                        .map_or("", |(_, t)| *t)
                                        .replace("pgb_push", &self.pgbench.queue);
                                    let path = dir.join(format!("run_{file}"));
                                    fs::write(&path, text)?;
                                    Some(path)
                                } else {
                                    Some(dir.join(file))
                                }
                            }
                            Script::Builtin(_) => None,
                        };
                        let pids = (
                            self.probes.postmaster,
                            self.probes.proxy,
                            bouncer.as_ref().map(|b| b.pid),
                        );
                        let run = run_pgbench(
                            &pgbench,
                            &cfg,
                            script,
                            script_path.as_deref(),
                            mode,
                            length,
                            pids,
                        )
                        .await;
                        if !cell.drains {
                            self.pgbench_cleanup(cell.name, system).await?;
                        }
                        match run {
                            Ok((tps, txns, cpu)) => {
                                let mut msgs_per_txn = cell.per_txn as f64;
                                if cell.drains {
                                    let key = if system == "queenwire" {
                                        "qw:pgb_pop"
                                    } else {
                                        "pgmq:pgb_pop"
                                    };
                                    let left = self.pop_left(system).await?;
                                    let taken = self.levels[key].saturating_sub(left);
                                    self.levels.insert(key.into(), left);
                                    msgs_per_txn = taken as f64 / txns.max(1) as f64;
                                }
                                eprintln!(
                                    "bench: pgbench {:<10} -M {:<8} round {} {system:<10} {tps:>9.0} tps  {:>9.0} msgs/s",
                                    cell.name,
                                    mode.name(),
                                    round + 1,
                                    tps * msgs_per_txn
                                );
                                let per = |us: u64| us as f64 / txns.max(1) as f64;
                                self.pgbench.runs.push(Run {
                                    cell: cell.name,
                                    mode: mode.name(),
                                    system,
                                    tps,
                                    msgs_per_txn,
                                    cpu_us: (
                                        per(cpu.0),
                                        (system == "queenwire").then(|| per(cpu.1)),
                                        (system == "pgbouncer").then(|| per(cpu.2)),
                                        per(cpu.3),
                                    ),
                                });
                            }
                            Err(e) => {
                                let why = format!(
                                    "pgbench {} -M {} round {} {system}: {e}",
                                    cell.name,
                                    mode.name(),
                                    round + 1
                                );
                                eprintln!("bench: {why}");
                                self.pgbench.notes.push(why);
                            }
                        }
                    }
                }
                // The native twin in the same round, slices as long as a
                // pgbench run: the two load generators measured on the
                // same minutes of the machine, whose speed drifts.
                if let Some((workload, a, b)) = cell.twin {
                    self.twin_round(workload, a, b, round, f64::from(secs))
                        .await?;
                }
            }
        }
        Ok(())
    }

    /// Messages left in the POP cells' queue of `system`.
    async fn pop_left(&mut self, system: &str) -> Result<u64, BoxError> {
        if system != "queenwire" {
            let row = self
                .pg_admin
                .query_one("SELECT count(*) FROM pgmq.q_pgb_pop", &[])
                .await?;
            return Ok(row.get::<_, i64>(0).max(0) as u64);
        }
        for msg in self.qw_admin.simple_query("SHOW QUEUES").await? {
            if let tokio_postgres::SimpleQueryMessage::Row(row) = msg {
                if row.get("queue") == Some("pgb_pop") {
                    return Ok(row.get("pending").and_then(|v| v.parse().ok()).unwrap_or(0));
                }
            }
        }
        Err("SHOW QUEUES has no pgb_pop".into())
    }

    /// A fresh target before each timed push run: a new queue (its name in
    /// the script replaced), as the native cells do.
    async fn pgbench_setup(&mut self, cell: &str, system: &str) -> Result<(), BoxError> {
        if !cell.starts_with("push") {
            return Ok(());
        }
        let queue = self.next_name("pgb_push");
        match system {
            "queenwire" => {
                self.qw_admin
                    .simple_query(&format!("CREATE QUEUE {queue}"))
                    .await?;
            }
            "pgmq" => {
                self.pg_admin
                    .execute("SELECT pgmq.create($1)", &[&queue])
                    .await?;
            }
            _ => {}
        }
        self.pgbench.queue = queue;
        Ok(())
    }

    /// After a timed push run: pgmq's queue (a table of its own) dropped,
    /// the INSERT table truncated. A queenwire queue is left in place: its
    /// messages share the queen tables with every queue, and deleting them
    /// leaves dead rows that slowed the next run by up to a third.
    async fn pgbench_cleanup(&mut self, cell: &str, system: &str) -> Result<(), BoxError> {
        if !cell.starts_with("push") {
            return Ok(());
        }
        match system {
            "queenwire" => {}
            "pgmq" => {
                let queue = self.pgbench.queue.clone();
                self.pg_admin
                    .execute("SELECT pgmq.drop_queue($1)", &[&queue])
                    .await?;
            }
            _ => {
                self.pg_admin.batch_execute("TRUNCATE bench_insert").await?;
            }
        }
        Ok(())
    }
}

#[derive(Clone, Copy)]
enum Length {
    Secs(u32),
    Txns(u64),
}

/// Runs pgbench once; (tps, transactions, CPU µs of the cluster, queenwire
/// and PgBouncer over the run).
async fn run_pgbench(
    pgbench: &Path,
    cfg: &Config,
    script: Script,
    path: Option<&Path>,
    mode: Mode,
    length: Length,
    pids: (u32, u32, Option<u32>),
) -> Result<(f64, u64, (u64, u64, u64, u64)), String> {
    let target = setup::libpq_args(cfg).map_err(|e| e.to_string())?;
    let mut cmd = tokio::process::Command::new(pgbench);
    cmd.arg("-n")
        .args(["-c", &CLIENTS.to_string(), "-j", &THREADS.to_string()])
        .args(["-M", mode.name()]);
    match length {
        Length::Secs(s) => cmd.args(["-T", &s.to_string()]),
        Length::Txns(t) => cmd.args(["-t", &t.to_string()]),
    };
    match (script, path) {
        (Script::Builtin(name), _) => cmd.args(["-b", name]),
        (Script::File(..), Some(p)) => cmd.arg("-f").arg(p),
        (Script::File(..), None) => return Err("no script file".into()),
    };
    cmd.args(&target)
        .env("PGCONNECT_TIMEOUT", "10")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let cpu = || {
        (
            procfs::cluster_cpu_us(pids.0),
            procfs::process_cpu_us(pids.1),
            pids.2.map_or(0, procfs::process_cpu_us),
            procfs::children_cpu_us(),
        )
    };
    let before = cpu();
    let limit = match length {
        Length::Secs(s) => Duration::from_secs(u64::from(s) + 60),
        Length::Txns(_) => Duration::from_secs(300),
    };
    let out = match tokio::time::timeout(limit, cmd.output()).await {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => return Err(format!("pgbench: {e}")),
        Err(_) => return Err(format!("pgbench did not finish within {limit:?}")),
    };
    let after = cpu();
    let text = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let failed = parse_count(&text, "number of failed transactions: ").unwrap_or(0);
    match (
        parse_tps(&text),
        parse_count(&text, "number of transactions actually processed: "),
    ) {
        (Some(tps), Some(txns)) if out.status.success() && failed == 0 => Ok((
            tps,
            txns,
            (
                after.0.saturating_sub(before.0),
                after.1.saturating_sub(before.1),
                after.2.saturating_sub(before.2),
                after.3.saturating_sub(before.3),
            ),
        )),
        _ => Err(format!(
            "{} {}",
            text.lines().last().unwrap_or(""),
            stderr.lines().rfind(|l| !l.trim().is_empty()).unwrap_or("")
        )),
    }
}

/// `pgbench -i -s TPCB_SCALE` on the cluster (once per run).
async fn tpcb_init(pgbench: &Path, direct: &Config) -> Result<(), BoxError> {
    eprintln!("bench: pgbench -i -s {TPCB_SCALE}");
    let out = tokio::process::Command::new(pgbench)
        .args(["-i", "-q", "-s", &TPCB_SCALE.to_string()])
        .args(setup::libpq_args(direct)?)
        .stdin(Stdio::null())
        .output()
        .await?;
    if !out.status.success() {
        return Err(format!(
            "pgbench -i failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Ok(())
}

/// Starts PgBouncer (Debian's package: installed with apt-get when missing
/// and this process may) in front of the cluster: transaction pooling,
/// `pool_size` server connections, listening like queenwire does over
/// `transport`, and reaching the cluster over the same transport. Runs as
/// the cluster's own user (PgBouncer refuses root).
async fn start_pgbouncer(
    cluster: &setup::Cluster,
    transport: Transport,
    pool_size: usize,
) -> Result<PgBouncer, BoxError> {
    let binary = match find_pgbouncer() {
        Some(b) => b,
        None => {
            eprintln!("bench: PgBouncer is not installed; apt-get install pgbouncer");
            let ok = tokio::process::Command::new("apt-get")
                .args(["install", "-y", "-q", "pgbouncer"])
                .env("DEBIAN_FRONTEND", "noninteractive")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .await
                .map(|s| s.success())
                .unwrap_or(false);
            match (ok, find_pgbouncer()) {
                (true, Some(b)) => b,
                _ => return Err("not installed, and apt-get install pgbouncer failed".into()),
            }
        }
    };
    let (uid, gid) = owner(cluster.pg.pid()).ok_or("cannot read the cluster's user")?;
    let dir = cluster.dir.join("pgbouncer");
    fs::create_dir_all(&dir)?;
    let port = setup::free_port()?;
    let backend = match transport {
        Transport::Tcp => "127.0.0.1".to_string(),
        Transport::Unix => cluster.pg.socket_dir().display().to_string(),
    };
    let user = cluster.pg.user();
    let ini = format!(
        "[databases]\n\
         * = host={backend} port={pgport}\n\
         [pgbouncer]\n\
         listen_addr = 127.0.0.1\n\
         listen_port = {port}\n\
         unix_socket_dir = {dir}\n\
         auth_type = trust\n\
         auth_file = {dir}/userlist.txt\n\
         pool_mode = transaction\n\
         default_pool_size = {pool_size}\n\
         max_client_conn = 200\n\
         logfile = {dir}/pgbouncer.log\n\
         pidfile = {dir}/pgbouncer.pid\n\
         ignore_startup_parameters = extra_float_digits\n",
        pgport = cluster.pg.port(),
        dir = dir.display(),
    );
    fs::write(dir.join("pgbouncer.ini"), ini)?;
    fs::write(dir.join("userlist.txt"), format!("\"{user}\" \"\"\n"))?;
    chown_all(&dir, uid, gid)?;
    let child = tokio::process::Command::new(&binary)
        .arg(dir.join("pgbouncer.ini"))
        .uid(uid)
        .gid(gid)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let pid = child.id().ok_or("PgBouncer exited at once")?;
    let mut cfg = Config::new();
    match transport {
        Transport::Tcp => cfg.host("127.0.0.1"),
        Transport::Unix => cfg.host_path(&dir),
    };
    cfg.port(port)
        .user(user)
        .dbname(cluster.pg.database())
        .connect_timeout(Duration::from_secs(5));
    let bouncer = PgBouncer { child, pid, cfg };
    for _ in 0..50 {
        if let Ok(c) = setup::connect(&bouncer.cfg).await {
            if c.simple_query("SELECT 1").await.is_ok() {
                let version = tokio::process::Command::new(&binary)
                    .arg("--version")
                    .output()
                    .await
                    .map(|o| {
                        String::from_utf8_lossy(&o.stdout)
                            .lines()
                            .next()
                            .unwrap_or("")
                            .to_string()
                    })
                    .unwrap_or_default();
                eprintln!(
                    "bench: {version} (transaction pooling, pool {pool_size}) on port {port}"
                );
                return Ok(bouncer);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let log = fs::read_to_string(dir.join("pgbouncer.log")).unwrap_or_default();
    Err(format!(
        "did not accept connections within 5 s: {}",
        log.lines().last().unwrap_or("")
    )
    .into())
}

fn find_pgbouncer() -> Option<PathBuf> {
    [
        "/usr/sbin/pgbouncer",
        "/usr/bin/pgbouncer",
        "/usr/local/bin/pgbouncer",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.exists())
}

/// The real uid and gid of a process.
fn owner(pid: u32) -> Option<(u32, u32)> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<u32> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    Some((field("Uid:")?, field("Gid:")?))
}

fn chown_all(dir: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
    std::os::unix::fs::chown(dir, Some(uid), Some(gid))?;
    for entry in fs::read_dir(dir)? {
        std::os::unix::fs::chown(entry?.path(), Some(uid), Some(gid))?;
    }
    Ok(())
}

pub fn find_pgbench() -> Option<PathBuf> {
    if let Ok(out) = std::process::Command::new("pgbench")
        .arg("--version")
        .output()
    {
        if out.status.success() {
            return Some("pgbench".into());
        }
    }
    let mut found: Vec<_> = fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .map(|e| e.path().join("bin/pgbench"))
        .filter(|p| p.exists())
        .collect();
    found.sort();
    found.pop()
}

/// `tps = 1234.5 (without initial connection time)`.
pub fn parse_tps(out: &str) -> Option<f64> {
    out.lines()
        .find(|l| l.starts_with("tps = ") && l.contains("without initial connection"))
        .and_then(|l| l["tps = ".len()..].split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// The first number after `prefix` on a line that starts with it
/// (`number of transactions actually processed: 1200/1200`).
fn parse_count(out: &str, prefix: &str) -> Option<u64> {
    let rest = out.lines().find_map(|l| l.strip_prefix(prefix))?;
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok()
}

impl Results {
    fn rates(&self, cell: &str, mode: &str, system: &str) -> Vec<f64> {
        self.runs
            .iter()
            .filter(|r| r.cell == cell && r.mode == mode && r.system == system)
            .map(|r| r.tps)
            .collect()
    }

    /// Median tps of a (cell, mode, system).
    pub fn median(&self, cell: &str, mode: &str, system: &str) -> Option<f64> {
        let mut r = self.rates(cell, mode, system);
        (!r.is_empty()).then(|| median(&mut r))
    }

    /// Median messages a transaction moved.
    fn msgs_per_txn(&self, cell: &str, mode: &str, system: &str) -> f64 {
        let mut v: Vec<f64> = self
            .runs
            .iter()
            .filter(|r| r.cell == cell && r.mode == mode && r.system == system)
            .map(|r| r.msgs_per_txn)
            .collect();
        if v.is_empty() {
            0.0
        } else {
            median(&mut v)
        }
    }

    /// `a ÷ b` of the messages moved per second, in one mode.
    pub fn ratio(&self, cell: &str, mode: &str, a: &str, b: &str) -> Option<f64> {
        match (self.median(cell, mode, a), self.median(cell, mode, b)) {
            (Some(x), Some(y)) if y > 0.0 => {
                Some(x * self.msgs_per_txn(cell, mode, a) / (y * self.msgs_per_txn(cell, mode, b)))
                    .filter(|r| r.is_finite() && *r > 0.0)
            }
            _ => None,
        }
    }

    /// The worse of the simple and prepared ratios (the headline figure).
    pub fn worse(&self, cell: &str, a: &str, b: &str) -> Option<f64> {
        let s = self.ratio(cell, "simple", a, b);
        let p = self.ratio(cell, "prepared", a, b);
        match (s, p) {
            (Some(s), Some(p)) => Some(s.min(p)),
            (x, y) => x.or(y),
        }
    }

    /// Median CPU µs per transaction of a (cell, mode, system): the
    /// cluster, the proxy (queenwire or PgBouncer), pgbench.
    fn cpu(&self, cell: &str, mode: &str, system: &str) -> (Option<f64>, Option<f64>, Option<f64>) {
        let runs: Vec<&Run> = self
            .runs
            .iter()
            .filter(|r| r.cell == cell && r.mode == mode && r.system == system)
            .collect();
        let med = |mut v: Vec<f64>| (!v.is_empty()).then(|| median(&mut v));
        (
            med(runs.iter().map(|r| r.cpu_us.0).collect()),
            med(runs
                .iter()
                .filter_map(|r| r.cpu_us.1.or(r.cpu_us.2))
                .collect()),
            med(runs.iter().map(|r| r.cpu_us.3).collect()),
        )
    }

    /// The pgbench section of the report; the ratios line's pairs.
    pub fn print(&self, native: &dyn Fn(&str, &str) -> Option<f64>) -> Vec<(String, String)> {
        let mut pairs = Vec::new();
        if self.runs.is_empty() && self.notes.is_empty() {
            return pairs;
        }
        println!("### pgbench");
        println!();
        println!(
            "pgbench -c {CLIENTS} -j {THREADS}, {} s a run (the POP cells: -t {POP_TXNS} from a queue holding twice what they take), every system over {}; scripts in bench/pgbench/. tps: median (min–max) over the rounds; msgs/s = tps × messages a transaction; CPU: µs per transaction of the cluster's processes and of the proxy (queenwire or PgBouncer), from /proc, and of pgbench (getrusage of the children).",
            self.secs, self.transport
        );
        println!();
        println!("| cell | -M | system | tps | min–max | msgs/s | CPU µs/txn: postgres | proxy | pgbench |");
        println!("|---|---|---|---:|---:|---:|---:|---:|---:|");
        for cell in CELLS {
            for mode in cell.modes {
                for (system, _) in cell.systems {
                    let rates = self.rates(cell.name, mode.name(), system);
                    if rates.is_empty() {
                        continue;
                    }
                    let med = median(&mut rates.clone());
                    let (lo, hi) = rates
                        .iter()
                        .fold((f64::MAX, 0f64), |(l, h), &r| (l.min(r), h.max(r)));
                    let (pg, proxy, client) = self.cpu(cell.name, mode.name(), system);
                    let f = |v: Option<f64>| v.map_or("–".into(), |v| format!("{v:.0}"));
                    println!(
                        "| {} | {} | {system} | {med:.0} | {lo:.0}–{hi:.0} | {:.0} | {} | {} | {} |",
                        cell.name,
                        mode.name(),
                        med * self.msgs_per_txn(cell.name, mode.name(), system),
                        f(pg),
                        f(proxy),
                        f(client)
                    );
                }
            }
        }
        println!();
        let fmt = |v: Option<f64>| v.map_or("n/a".to_string(), |v| format!("{v:.2}"));
        for cell in CELLS {
            let (first, _) = cell.systems[0];
            for (other, _) in &cell.systems[1..] {
                let key = format!("pgbench_{}_vs_{}", cell.name, other.to_lowercase());
                // The headline: the worse of -M simple and -M prepared.
                if cell.modes == BOTH {
                    pairs.push((key.clone(), fmt(self.worse(cell.name, first, other))));
                }
                for mode in cell.modes {
                    pairs.push((
                        format!("{key}_{}", mode.name()),
                        fmt(self.ratio(cell.name, mode.name(), first, other)),
                    ));
                }
            }
            if let Some((workload, a, b)) = cell.twin {
                // The native cells use the extended protocol with prepared
                // statements: their twin is -M prepared. 1.00: they agree.
                let pg = self.ratio(cell.name, "prepared", "queenwire", b);
                let nat = match (native(workload, a), native(workload, b)) {
                    (Some(x), Some(y)) if y > 0.0 => Some(x / y),
                    _ => None,
                };
                let agree = match (nat, pg) {
                    (Some(n), Some(p)) if p > 0.0 => Some(n / p),
                    _ => None,
                };
                pairs.push((
                    format!("native_{workload}_vs_pgbench_{}", cell.name),
                    fmt(agree),
                ));
            }
        }
        pairs.push((
            "select1_vs_pgbouncer".into(),
            fmt(self.ratio("select1", "simple", "queenwire", "pgbouncer")),
        ));
        pairs.push((
            "select1_extended_vs_pgbouncer".into(),
            fmt(self.ratio("select1", "extended", "queenwire", "pgbouncer")),
        ));
        pairs.push((
            "tpcb_vs_pgbouncer".into(),
            fmt(self.ratio("tpcb", "simple", "queenwire", "pgbouncer")),
        ));
        for system in ["queenwire", "pgbouncer"] {
            pairs.push((
                format!("{system}_cpu_us_per_select1"),
                self.cpu("select1", "simple", system)
                    .1
                    .map_or("n/a".into(), |v| format!("{v:.1}")),
            ));
        }
        for n in &self.notes {
            println!("note: {n}");
        }
        if !self.notes.is_empty() {
            println!();
        }
        pairs
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_pgbench_output() {
        let out = "number of transactions actually processed: 1200/1200\nnumber of failed transactions: 0 (0.000%)\nlatency average = 1.2 ms\ninitial connection time = 3.1 ms\ntps = 6543.210987 (without initial connection time)\n";
        assert_eq!(super::parse_tps(out), Some(6543.210987));
        assert_eq!(super::parse_tps("tps = x"), None);
        assert_eq!(
            super::parse_count(out, "number of transactions actually processed: "),
            Some(1200)
        );
        assert_eq!(
            super::parse_count(out, "number of failed transactions: "),
            Some(0)
        );
    }

    #[test]
    fn the_hundred_message_scripts_carry_the_benchmarks_own_payloads() {
        // All different, as the native cells send them: one JSON object
        // repeated a hundred times compresses into a fraction of a segment
        // and flattered queenwire's PUSH by a third.
        for name in ["qw_push100.sql", "pgmq_push100.sql", "insert_push100.sql"] {
            let text = super::SCRIPTS
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, t)| *t)
                .unwrap_or_else(|| panic!("{name}: no such script"));
            let objects: Vec<&str> = text
                .split('\'')
                .filter(|part| part.starts_with('{'))
                .collect();
            let expected: Vec<String> = (0..100).map(crate::payload::payload_spaced).collect();
            assert_eq!(objects, expected, "{name}");
        }
    }

    #[test]
    fn scripts_have_no_stray_variables() {
        // pgbench takes `:name` anywhere in a script as a variable (a
        // `::` cast is left alone).
        for (name, text) in super::SCRIPTS {
            let text = text.replace("::", "");
            for (i, _) in text.match_indices(':') {
                let next = text[i + 1..].chars().next().unwrap_or(' ');
                if next.is_ascii_alphanumeric() || next == '_' {
                    let var: String = text[i + 1..]
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    assert_eq!(var, "p", "{name}: variable :{var}");
                }
            }
        }
    }
}
