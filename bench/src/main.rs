//! queenwire-bench: queenwire against pgmq, plain INSERT and its own
//! procedures called directly, on one PostgreSQL, in one run, as ratios.
//!
//!     cargo run --release -p queenwire-bench -- [--quick]
//!
//! See docs/benchmarks.md for what each workload does and the latest
//! figures. Traffic goes only to 127.0.0.1 and the cluster's Unix socket;
//! every loop is bounded in time and count.

mod extra;
mod figures;
mod ops;
mod payload;
mod pgbench;
mod pgtypes;
mod procfs;
mod quiet;
mod runner;
mod setup;
mod soak;
mod stream;
mod wire;

use ops::{Op, SeqProducer, Worker};
use payload::Payloads;
use runner::{median, percentile, run_slice, Cpu, Probes, Slice, SliceSpec};
use setup::BoxError;
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_postgres::{Client, Config};

const USAGE: &str = "\
usage: queenwire-bench [--quick] [--rounds N] [--secs S] [--concurrency 1,8,32]
                       [--pool-size N] [--only W1,W2] [--systems S1,S2]
                       [--prefill-cap N] [--transport tcp|unix] [--pgbench]
                       [--queenwire PATH] [--keep]

  --quick        C=8 only, 3 rounds of 1 s (under 3 minutes)
  --rounds N     rounds per cell, interleaved across systems (default 5; quick 3)
  --secs S       seconds per slice (default 1.5; quick 1)
  --concurrency  client connections per cell (default 1,8,32; quick 8; the
                 jobs cells have their own: 8 or 64 workers)
  --pool-size N  queenwire's backend pool (default 16, queenwire's default)
  --only         workloads: push1,push100,push1_100p,push100_100p,push1_text,
                 push100_text,push1_nq,popack1,popack100,autoack1,autoack100,
                 popack1_1p_shared,popack100_1p_shared,jobs8_20ms,
                 jobs8_20ms_tx,jobs64_0ms,e2e,fanout,select1,pop_scale,tpcb,
                 idle1000,stream; in the pgbench mode also pop100
  --systems      run only these systems (queenwire, pgmq, INSERT, direct;
                 a prefix: queenwire covers queenwire 1000p), e.g. to profile
  --prefill-cap  most messages queued before one consume slice (default 400000)
  --transport    how every client reaches every system, and queenwire its
                 backend: tcp on 127.0.0.1 (default) or unix sockets
  --pgbench      the pgbench mode: the headline cells as pgbench scripts
                 (bench/pgbench/), -M simple and -M prepared, each round
                 with its native twin, and PgBouncer beside queenwire for
                 select1 and TPC-B
  --queenwire    the queenwire binary (default: built next to this one)
  --keep         keep the data directory (/tmp/qwbench-PID)
  --soak [MIN]   the soak mode instead (default 30 minutes; --soak --help)
  --figures [N]  queenwire's own figures instead (the hot list, wildcard
                 and ephemeral POP, retention; --figures --help)";

const WORKLOADS: &[&str] = &[
    "push1",
    "push100",
    "push1_100p",
    "push100_100p",
    "push1_text",
    "push100_text",
    "push1_nq",
    "popack1",
    "popack100",
    "autoack1",
    "autoack100",
    "popack1_1p_shared",
    "popack100_1p_shared",
    "jobs8_20ms",
    "jobs8_20ms_tx",
    "jobs64_0ms",
    "e2e",
    "fanout",
    "select1",
    "pop_scale",
    "tpcb",
    "idle1000",
    "stream",
];
/// Partitions of the spread-push workloads (a random one per statement).
const SPREAD_PARTITIONS: usize = 100;

/// How a push workload sends its statements.
#[derive(Clone, Copy, PartialEq)]
enum PushShape {
    /// Extended protocol, prepared, into one partition.
    OnePartition,
    /// Extended protocol, prepared, a random partition of 100 per statement.
    Spread,
    /// Text over the simple protocol, into one partition.
    Text,
    /// Extended protocol, prepared, each client into a queue of its own
    /// (the shape fusion across the queues of a tenant is about).
    QueuePerClient,
}
/// Partitions of the many-partition consume queue.
const MANY_PARTITIONS: usize = 1000;
/// The job-queue cells: workers, each looping POP one job, `work_ms` of
/// sleep (the job), ACK it; in a transaction block it commits when `tx`.
struct JobCell {
    name: &'static str,
    workers: usize,
    work_ms: u64,
    tx: bool,
}
const JOB_CELLS: &[JobCell] = &[
    JobCell {
        name: "jobs8_20ms",
        workers: 8,
        work_ms: 20,
        tx: false,
    },
    JobCell {
        name: "jobs8_20ms_tx",
        workers: 8,
        work_ms: 20,
        tx: true,
    },
    JobCell {
        name: "jobs64_0ms",
        workers: 64,
        work_ms: 0,
        tx: false,
    },
];
/// Slices of job cells whose jobs take time last at least this long (at
/// 20 ms a job, 8 workers do at most 400 jobs/s: 2 s is 100 jobs a
/// worker).
const JOB_MIN_SECS: f64 = 2.0;
/// How long a queenwire job worker's POP waits for a job.
const JOB_WAIT: &str = "200ms";
/// End-to-end workload: offered rate, producers, consumers, partitions.
const E2E_RATE: u64 = 200;
const E2E_PRODUCERS: usize = 4;
const E2E_CONSUMERS: usize = 4;
const E2E_PARTITIONS: usize = 8;
/// Fan-out workload: groups and partitions.
const FANOUT_GROUPS: usize = 5;
const FANOUT_PARTITIONS: usize = 16;
/// Prefill sizes are clamped to this many messages per slice.
const PREFILL_CAP: u64 = 400_000;

#[derive(Debug, Clone)]
struct Args {
    quick: bool,
    rounds: usize,
    secs: f64,
    concurrency: Vec<usize>,
    pool_size: usize,
    only: Option<Vec<String>>,
    systems: Option<Vec<String>>,
    prefill_cap: u64,
    queenwire: Option<PathBuf>,
    keep: bool,
    transport: Transport,
    pgbench: bool,
    /// `--only` was given (the pgbench mode sets `only` to no native cell).
    only_given: bool,
}

/// How the load generator reaches every system, and queenwire its backend:
/// the same on both sides of every comparison.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Transport {
    Tcp,
    Unix,
}

impl Transport {
    fn name(self) -> &'static str {
        match self {
            Transport::Tcp => "TCP on 127.0.0.1",
            Transport::Unix => "Unix sockets",
        }
    }
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        quick: false,
        rounds: 5,
        secs: 1.5,
        concurrency: vec![1, 8, 32],
        pool_size: 16,
        only: None,
        systems: None,
        prefill_cap: PREFILL_CAP,
        queenwire: None,
        keep: false,
        transport: Transport::Tcp,
        pgbench: false,
        only_given: false,
    };
    let (mut secs, mut conc, mut rounds) = (None, None, None::<usize>);
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--quick" => a.quick = true,
            "--rounds" => {
                rounds = Some(
                    value("--rounds")?
                        .parse()
                        .map_err(|e| format!("--rounds: {e}"))?,
                )
            }
            "--secs" => {
                secs = Some(
                    value("--secs")?
                        .parse::<f64>()
                        .map_err(|e| format!("--secs: {e}"))?,
                )
            }
            "--concurrency" => {
                conc = Some(
                    value("--concurrency")?
                        .split(',')
                        .map(|s| {
                            s.trim()
                                .parse::<usize>()
                                .map_err(|e| format!("--concurrency: {e}"))
                        })
                        .collect::<Result<Vec<_>, _>>()?,
                )
            }
            "--pool-size" => {
                a.pool_size = value("--pool-size")?
                    .parse()
                    .map_err(|e| format!("--pool-size: {e}"))?
            }
            "--prefill-cap" => {
                a.prefill_cap = value("--prefill-cap")?
                    .parse()
                    .map_err(|e| format!("--prefill-cap: {e}"))?
            }
            "--systems" => {
                a.systems = Some(
                    value("--systems")?
                        .split(',')
                        .map(|s| s.trim().to_string())
                        .collect(),
                )
            }
            "--only" => {
                let list: Vec<String> = value("--only")?
                    .split(',')
                    .map(|s| s.trim().to_string())
                    .collect();
                if let Some(bad) = list.iter().find(|w| {
                    !WORKLOADS.contains(&w.as_str()) && !pgbench::CELL_NAMES.contains(&w.as_str())
                }) {
                    return Err(format!("unknown workload {bad}"));
                }
                a.only = Some(list);
                a.only_given = true;
            }
            "--queenwire" => a.queenwire = Some(PathBuf::from(value("--queenwire")?)),
            "--keep" => a.keep = true,
            "--pgbench" => a.pgbench = true,
            "--transport" => {
                a.transport = match value("--transport")?.as_str() {
                    "tcp" => Transport::Tcp,
                    "unix" => Transport::Unix,
                    other => return Err(format!("--transport: tcp or unix, not {other}")),
                }
            }
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if a.quick {
        a.rounds = 3;
        a.secs = 1.0;
        a.concurrency = vec![8];
    }
    if a.pgbench {
        // The pgbench cells run their native twins in their own rounds
        // (pgbench.rs): no other native cell unless asked for.
        if a.only.is_none() {
            a.only = Some(Vec::new());
        }
        if conc.is_none() {
            a.concurrency = vec![pgbench::CLIENTS];
        }
    }
    if let Some(s) = secs {
        a.secs = s;
    }
    if let Some(r) = rounds {
        a.rounds = r;
    }
    if let Some(c) = conc {
        a.concurrency = c;
    }
    if a.rounds == 0
        || a.rounds > 20
        || !(0.1..=60.0).contains(&a.secs)
        || a.concurrency.is_empty()
        || a.concurrency.iter().any(|&c| c == 0 || c > 256)
        || a.pool_size == 0
    {
        return Err("rounds 1-20, secs 0.1-60, concurrency 1-256, pool size >= 1".into());
    }
    Ok(a)
}

/// One (workload, system, concurrency) and its rounds.
struct Cell {
    workload: String,
    system: String,
    c: usize,
    slices: Vec<Slice>,
    /// Extra text for the notes column.
    note: String,
}

impl Cell {
    fn rates(&self) -> Vec<f64> {
        self.slices
            .iter()
            .filter(|s| s.error.is_none())
            .map(Slice::rate)
            .collect()
    }

    fn median_rate(&self) -> Option<f64> {
        let mut r = self.rates();
        (!r.is_empty()).then(|| median(&mut r))
    }
}

struct Bench {
    args: Args,
    /// queenwire, over `args.transport`.
    proxy_cfg: Config,
    /// The cluster, over `args.transport`: pgmq, INSERT and the engine's
    /// own procedures called directly.
    direct_cfg: Config,
    qw_admin: Client,
    pg_admin: Client,
    payloads: Arc<Payloads>,
    probes: Probes,
    cells: Vec<Cell>,
    /// Messages waiting in each consume queue.
    levels: HashMap<String, u64>,
    /// Last measured rate of a (workload, system, c): sizes the next prefill.
    estimates: HashMap<(String, String, usize), f64>,
    serial: usize,
    started: Instant,
    extras: extra::Extras,
    /// The pgbench mode's runs.
    pgbench: pgbench::Results,
    quiet: quiet::Quiet,
    /// The quiet-machine check's warnings: (cell, why).
    busy: Vec<(String, String)>,
}

fn duration(secs: f64) -> Duration {
    Duration::from_secs_f64(secs)
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.iter().any(|a| a == "--soak") {
        return soak_main(&argv);
    }
    if argv.iter().any(|a| a == "--figures") {
        return figures_main(&argv);
    }
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("queenwire-bench: {e}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("queenwire-bench: runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("queenwire-bench: {}", setup::describe(&*e));
            ExitCode::FAILURE
        }
    }
}

/// `--soak`: see soak.rs.
fn soak_main(argv: &[String]) -> ExitCode {
    match soak::parse_args(argv) {
        Ok(args) => run_mode(soak::run(args)),
        Err(e) => usage_error(&e, soak::USAGE),
    }
}

/// `--figures`: see figures/mod.rs.
fn figures_main(argv: &[String]) -> ExitCode {
    match figures::parse_args(argv) {
        Ok(args) => run_mode(figures::run(args)),
        Err(e) => usage_error(&e, figures::USAGE),
    }
}

fn usage_error(e: &str, usage: &str) -> ExitCode {
    if !e.is_empty() {
        eprintln!("queenwire-bench: {e}");
    }
    eprintln!("{usage}");
    ExitCode::from(2)
}

/// Runs a mode other than the cells on the benchmark's runtime.
fn run_mode(mode: impl std::future::Future<Output = Result<(), BoxError>>) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("queenwire-bench: runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(mode) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("queenwire-bench: {}", setup::describe(&*e));
            ExitCode::FAILURE
        }
    }
}

/// Kills what we started if the whole run overstays its limit.
pub(crate) fn watchdog(limit: Duration, pids: Arc<(AtomicU64, AtomicU64)>) {
    std::thread::spawn(move || {
        std::thread::sleep(limit);
        eprintln!("queenwire-bench: the run exceeded {limit:?}; stopping");
        let (proxy, postmaster) = (
            pids.0.load(Ordering::Relaxed),
            pids.1.load(Ordering::Relaxed),
        );
        // SAFETY: signals to the processes this run started.
        unsafe {
            if proxy > 0 {
                libc::kill(proxy as i32, libc::SIGKILL);
            }
            if postmaster > 0 {
                libc::kill(postmaster as i32, libc::SIGINT);
            }
        }
        std::thread::sleep(Duration::from_secs(5));
        std::process::exit(3);
    });
}

async fn run(args: Args) -> Result<(), BoxError> {
    let started = Instant::now();
    let pids = Arc::new((AtomicU64::new(0), AtomicU64::new(0)));
    watchdog(
        if args.pgbench {
            Duration::from_secs(1800)
        } else if args.quick {
            Duration::from_secs(600)
        } else {
            Duration::from_secs(2700)
        },
        pids.clone(),
    );
    let binary = setup::queenwire_binary(args.queenwire.as_deref())?;
    eprintln!("bench: starting PostgreSQL (fresh data directory)");
    let cluster = setup::start_cluster().await?;
    pids.1.store(u64::from(cluster.pg.pid()), Ordering::Relaxed);
    let result = async {
        let direct_cfg = match args.transport {
            Transport::Tcp => cluster.tcp_config(),
            Transport::Unix => cluster.pg.client_config(),
        };
        let pg_admin = setup::connect(&direct_cfg).await?;
        eprintln!("bench: installing pgmq's SQL (pgmq crate 0.33.7, install-sql-embedded)");
        let pgmq_version = setup::install_pgmq(&cluster).await?;
        setup::create_insert_table(&pg_admin).await?;
        eprintln!(
            "bench: starting {} --pool-size {}",
            binary.display(),
            args.pool_size
        );
        let proxy = setup::start_proxy(
            &binary,
            &cluster.conninfo(args.transport),
            args.pool_size,
            &cluster.dir,
            // Room for the idle-clients workload's 1,000 beside the others.
            &["--max-connections".to_string(), "1200".to_string()],
            true,
        )
        .await?;
        pids.0.store(u64::from(proxy.pid), Ordering::Relaxed);
        let proxy_cfg = match args.transport {
            Transport::Tcp => proxy.client_config(),
            Transport::Unix => proxy.unix_client_config(),
        };
        let qw_admin = setup::connect(&proxy_cfg).await?;
        let mut bench = Bench {
            args: args.clone(),
            proxy_cfg,
            direct_cfg,
            qw_admin,
            pg_admin,
            payloads: Arc::new(Payloads::new(4096)),
            probes: Probes {
                postmaster: cluster.pg.pid(),
                proxy: proxy.pid,
            },
            cells: Vec::new(),
            levels: HashMap::new(),
            estimates: HashMap::new(),
            serial: 0,
            started,
            extras: extra::Extras::default(),
            pgbench: pgbench::Results::default(),
            quiet: quiet::Quiet::default(),
            busy: Vec::new(),
        };
        // A signal ends the measuring, not the cleanup: the partial report is
        // printed and both servers are stopped below.
        let outcome = tokio::select! {
            r = async {
                bench.run_all().await?;
                if bench.args.pgbench {
                    bench.pgbench_mode(&cluster).await?;
                }
                Ok(())
            } => r,
            s = interrupted() => Err(format!("interrupted by {s}; partial results").into()),
        };
        // The peak of the workloads, before the idle clients raise it.
        let rss = proxy.peak_rss_mb();
        let outcome = match outcome {
            Ok(()) if bench.wants("idle1000") && bench.runs("queenwire") => {
                bench.idle_clients(proxy.pid).await
            }
            other => other,
        };
        proxy.stop().await;
        let header = Header {
            machine: procfs::machine(),
            pg_version: cluster.version.clone(),
            pgmq_version,
            args: args.clone(),
            elapsed: started.elapsed(),
        };
        print_report(&bench, rss, &header);
        outcome
    }
    .await;
    cluster.stop(args.keep);
    result
}

/// The first of SIGINT, SIGTERM or SIGHUP.
async fn interrupted() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut int), Ok(mut term), Ok(mut hup)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
        signal(SignalKind::hangup()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = int.recv() => "SIGINT",
        _ = term.recv() => "SIGTERM",
        _ = hup.recv() => "SIGHUP",
    }
}

struct Header {
    machine: String,
    pg_version: String,
    pgmq_version: String,
    args: Args,
    elapsed: Duration,
}

impl Bench {
    /// `--systems`: labels starting with one of the given words.
    fn runs(&self, system: &str) -> bool {
        self.args
            .systems
            .as_ref()
            .is_none_or(|l| l.iter().any(|x| system.starts_with(x.as_str())))
    }

    /// Whether the native cell `w` runs. In the pgbench mode the pgbench
    /// cells' twins run in the pgbench cells' rounds instead.
    fn wants(&self, w: &str) -> bool {
        if self.args.pgbench && pgbench::is_twin(w) {
            return false;
        }
        self.args
            .only
            .as_ref()
            .is_none_or(|o| o.iter().any(|x| x == w))
    }

    /// The quiet-machine check before a cell (see quiet.rs): printed, and a
    /// warning kept for the report when the machine was busy.
    pub(crate) async fn quiet_check(&mut self, cell: &str) {
        let r = self.quiet.check().await;
        eprintln!(
            "bench: quiet check before {cell}: load average {:.2}, CPUs {:.0}% busy, probe {:.0} µs{}",
            r.load1,
            r.busy * 100.0,
            r.probe_us,
            r.warning.as_deref().map_or(String::new(), |w| format!("  WARNING: {w}"))
        );
        if let Some(w) = r.warning {
            self.busy.push((cell.to_string(), w));
        }
    }

    fn next_name(&mut self, prefix: &str) -> String {
        self.serial += 1;
        format!("{prefix}_{}", self.serial)
    }

    fn cell(&mut self, workload: &str, system: &str, c: usize) -> &mut Cell {
        let i = match self
            .cells
            .iter()
            .position(|x| x.workload == workload && x.system == system && x.c == c)
        {
            Some(i) => i,
            None => {
                self.cells.push(Cell {
                    workload: workload.into(),
                    system: system.into(),
                    c,
                    slices: Vec::new(),
                    note: String::new(),
                });
                self.cells.len() - 1
            }
        };
        &mut self.cells[i]
    }

    fn record(&mut self, workload: &str, system: &str, c: usize, round: usize, slice: Slice) {
        let rate = slice.rate();
        match &slice.error {
            Some(e) => eprintln!(
                "bench: {workload:<10} C={c:<2} round {} {system:<16} ERROR {e}",
                round + 1
            ),
            None => eprintln!(
                "bench: {workload:<10} C={c:<2} round {} {system:<16} {rate:>9.0} msg/s  ({} msgs in {:.2} s, {} empty answers) [{:.0} s]",
                round + 1,
                slice.msgs,
                slice.elapsed.as_secs_f64(),
                slice.empty,
                self.started.elapsed().as_secs_f64()
            ),
        }
        if slice.error.is_none() && slice.msgs > 0 {
            self.estimates
                .insert((workload.into(), system.into(), c), rate);
        }
        self.cell(workload, system, c).slices.push(slice);
    }

    async fn run_all(&mut self) -> Result<(), BoxError> {
        let concurrency = self.args.concurrency.clone();
        for (suffix, shape) in [
            ("", PushShape::OnePartition),
            ("_100p", PushShape::Spread),
            ("_text", PushShape::Text),
            ("_nq", PushShape::QueuePerClient),
        ] {
            for batch in [1usize, 100] {
                if shape == PushShape::QueuePerClient && batch != 1 {
                    continue;
                }
                let w = format!("push{batch}{suffix}");
                if self.wants(&w) {
                    self.quiet_check(&w).await;
                    for &c in &concurrency {
                        self.push_workload(&w, batch, c, shape).await?;
                    }
                }
            }
        }
        if [
            "popack1",
            "popack100",
            "autoack1",
            "autoack100",
            "popack1_1p_shared",
            "popack100_1p_shared",
        ]
        .iter()
        .any(|w| self.wants(w))
        {
            self.setup_consume_queues().await?;
            let both: &[(&str, &str)] = &[
                ("queenwire 1p", "qw:cons_p1"),
                ("queenwire 1000p", "qw:cons_p1000"),
                ("pgmq", "pgmq:cons"),
            ];
            // The one-partition queue with a shared group: its consumers
            // take messages of the one partition side by side. pgmq gets a
            // fresh queue too: its table of the earlier cells carries their
            // dead rows, which halved its rate in a full run.
            let shared: &[(&str, &str)] = &[
                ("queenwire 1p shared", "qw:cons_p1s"),
                ("pgmq", "pgmq:cons_s"),
            ];
            for (w, limit, auto, systems) in [
                ("popack1", 1, false, both),
                ("popack100", 100, false, both),
                ("autoack1", 1, true, both),
                ("autoack100", 100, true, both),
                ("popack1_1p_shared", 1, false, shared),
                ("popack100_1p_shared", 100, false, shared),
            ] {
                if self.wants(w) {
                    self.quiet_check(w).await;
                    for &c in &concurrency {
                        self.consume_workload(w, limit, auto, c, systems).await?;
                    }
                }
            }
        }
        for job in JOB_CELLS {
            if self.wants(job.name) {
                self.quiet_check(job.name).await;
                self.jobs_workload(job).await?;
            }
        }
        if self.wants("e2e") {
            self.quiet_check("e2e").await;
            for round in 0..self.args.rounds {
                for queenwire in [true, false] {
                    if !self.runs(if queenwire { "queenwire" } else { "pgmq" }) {
                        continue;
                    }
                    self.e2e(queenwire, round).await?;
                }
            }
        }
        if self.wants("fanout") {
            self.quiet_check("fanout").await;
            let per_group: Vec<usize> = if self.args.quick { vec![1] } else { vec![1, 4] };
            for k in per_group {
                if !self.runs("queenwire") {
                    break;
                }
                for round in 0..self.args.rounds {
                    self.fanout(k, round).await?;
                }
            }
        }
        if self.wants("select1") {
            self.quiet_check("select1").await;
            for &c in &concurrency {
                for round in 0..self.args.rounds {
                    let secs = self.args.secs;
                    self.select1_round(c, round, secs).await;
                }
            }
        }
        if self.wants("tpcb") {
            self.quiet_check("tpcb").await;
            self.tpcb().await?;
        }
        if self.wants("pop_scale") && self.runs("queenwire") {
            self.quiet_check("pop_scale").await;
            self.pop_scale().await?;
        }
        if self.wants("stream") && self.runs("queenwire") {
            self.quiet_check("stream").await;
            self.stream_lag().await?;
        }
        Ok(())
    }

    /// One round of the select1 cell: a slice of `secs` through queenwire,
    /// then one directly.
    async fn select1_round(&mut self, c: usize, round: usize, secs: f64) {
        for (system, cfg) in [
            ("queenwire", self.proxy_cfg.clone()),
            ("direct", self.direct_cfg.clone()),
        ] {
            if !self.runs(system) {
                continue;
            }
            let slice = run_slice(
                SliceSpec {
                    cfg: &cfg,
                    ops: vec![Op::Select1; c],
                    duration: duration(secs),
                    budget: None,
                    warmup: true,
                    label: format!("select1 C={c} {system}"),
                },
                &self.payloads,
                self.probes,
            )
            .await;
            self.record("select1", system, c, round, slice);
        }
    }

    /// One round of the native cell `workload` that a pgbench cell stands
    /// beside, its two systems `a` and `b` only, slices of `secs` (a
    /// consume cell's as its own rounds, ended by the queue's level): run
    /// in the same round as its pgbench twin, so the two load generators
    /// are compared on the same minutes of the machine.
    pub(crate) async fn twin_round(
        &mut self,
        workload: &str,
        a: &str,
        b: &str,
        round: usize,
        secs: f64,
    ) -> Result<(), BoxError> {
        let c = pgbench::CLIENTS;
        let push = |batch, shape| Some((batch, shape));
        let shape = match workload {
            "push1" => push(1, PushShape::OnePartition),
            "push1_100p" => push(1, PushShape::Spread),
            "push100" => push(100, PushShape::OnePartition),
            _ => None,
        };
        if let Some((batch, shape)) = shape {
            return self
                .push_round(workload, batch, c, shape, round, &[a, b], secs)
                .await;
        }
        match workload {
            "select1" => {
                self.select1_round(c, round, secs).await;
                Ok(())
            }
            "autoack100" => {
                if !self.levels.contains_key("qw:cons_p1000") {
                    self.setup_consume_queues().await?;
                }
                let systems: Vec<(&str, &str)> =
                    [("queenwire 1000p", "qw:cons_p1000"), ("pgmq", "pgmq:cons")]
                        .into_iter()
                        .filter(|(s, _)| *s == a || *s == b)
                        .collect();
                self.consume_round(workload, 100, true, c, &systems, round)
                    .await
            }
            other => Err(format!("no native twin {other}").into()),
        }
    }

    // ---- push ------------------------------------------------------------

    async fn push_workload(
        &mut self,
        w: &str,
        batch: usize,
        c: usize,
        shape: PushShape,
    ) -> Result<(), BoxError> {
        for round in 0..self.args.rounds {
            let systems = ["queenwire", "pgmq", "INSERT", "direct"];
            let secs = self.args.secs;
            self.push_round(w, batch, c, shape, round, &systems, secs)
                .await?;
        }
        Ok(())
    }

    /// One round of a push cell: a slice of `secs` for each of `systems`
    /// in turn, each into a fresh queue.
    #[allow(clippy::too_many_arguments)]
    async fn push_round(
        &mut self,
        w: &str,
        batch: usize,
        c: usize,
        shape: PushShape,
        round: usize,
        systems: &[&str],
        secs: f64,
    ) -> Result<(), BoxError> {
        for &system in systems {
            if !self.runs(system) {
                continue;
            }
            let queue = self.next_name("push");
            // One queue, or one per client.
            let names: Vec<String> = if shape == PushShape::QueuePerClient {
                (0..c).map(|i| format!("{queue}_{i}")).collect()
            } else {
                vec![queue]
            };
            let mut cfg = None;
            let mut ops = Vec::with_capacity(names.len());
            for name in &names {
                let Some((conf, op)) = self.push_target(system, name, batch, shape).await? else {
                    break;
                };
                cfg = Some(conf);
                ops.push(op);
            }
            let Some(cfg) = cfg else {
                continue;
            };
            let ops = match ops.as_slice() {
                [one] => vec![one.clone(); c],
                _ => ops,
            };
            let slice = run_slice(
                SliceSpec {
                    cfg: &cfg,
                    ops,
                    duration: duration(secs),
                    budget: None,
                    warmup: true,
                    label: format!("{w} C={c} {system}"),
                },
                &self.payloads,
                self.probes,
            )
            .await;
            // Clean up so every slice starts from the same state. A
            // queenwire queue is left in place: its messages share the
            // queen tables with every queue, and deleting them leaves
            // dead rows that slowed the next slice by up to a third
            // (pgmq's queue is a table of its own, dropped whole).
            match system {
                "queenwire" | "direct" => {}
                "pgmq" => {
                    for name in &names {
                        self.pg_admin
                            .execute("SELECT pgmq.drop_queue($1)", &[name])
                            .await?;
                    }
                }
                _ => {
                    self.pg_admin.batch_execute("TRUNCATE bench_insert").await?;
                }
            }
            self.record(w, system, c, round, slice);
        }
        Ok(())
    }

    /// Creates `queue` for `system` and returns the client config and the
    /// operation of a push workload into it; `None` when the system has no
    /// form of the shape.
    async fn push_target(
        &mut self,
        system: &str,
        queue: &str,
        batch: usize,
        shape: PushShape,
    ) -> Result<Option<(Config, Op)>, BoxError> {
        let spread = (shape == PushShape::Spread).then_some(SPREAD_PARTITIONS);
        let text = shape == PushShape::Text;
        let queue = queue.to_string();
        Ok(Some(match system {
            "queenwire" => {
                self.qw_admin
                    .simple_query(&format!("CREATE QUEUE {queue}"))
                    .await?;
                let op = if text {
                    Op::QwPushText { queue, batch }
                } else {
                    Op::QwPush {
                        queue,
                        batch,
                        partitions: spread,
                        random: true,
                    }
                };
                (self.proxy_cfg.clone(), op)
            }
            "pgmq" => {
                self.pg_admin
                    .execute("SELECT pgmq.create($1)", &[&queue])
                    .await?;
                let op = if text {
                    Op::PgmqSendText { queue, batch }
                } else {
                    Op::PgmqSend { queue, batch }
                };
                (self.direct_cfg.clone(), op)
            }
            "INSERT" if text => (self.direct_cfg.clone(), Op::InsertText { batch }),
            "INSERT" => (
                self.direct_cfg.clone(),
                Op::Insert {
                    batch,
                    partitions: spread,
                },
            ),
            // The engine's own call has no text form worth measuring.
            _ if text => return Ok(None),
            _ => {
                self.qw_admin
                    .simple_query(&format!("CREATE QUEUE {queue}"))
                    .await?;
                (
                    self.direct_cfg.clone(),
                    Op::DirectPush {
                        queue,
                        batch,
                        partitions: spread,
                    },
                )
            }
        }))
    }

    // ---- consume ---------------------------------------------------------

    async fn setup_consume_queues(&mut self) -> Result<(), BoxError> {
        self.qw_admin.simple_query("CREATE QUEUE cons_p1").await?;
        self.qw_admin
            .simple_query("CREATE QUEUE cons_p1000")
            .await?;
        self.qw_admin
            .simple_query("CREATE QUEUE cons_p1s WITH (ordered = false)")
            .await?;
        self.pg_admin
            .batch_execute("SELECT pgmq.create('cons'); SELECT pgmq.create('cons_s')")
            .await?;
        for k in [
            "qw:cons_p1",
            "qw:cons_p1000",
            "qw:cons_p1s",
            "pgmq:cons",
            "pgmq:cons_s",
        ] {
            self.levels.insert(k.into(), 0);
        }
        Ok(())
    }

    /// Pushes `n` (rounded up to 100s) more messages into a consume queue,
    /// 100 per statement (one segment per statement for queenwire). `key`
    /// is `qw:<queue>` (partition Default unless named below), `pgmq:<queue>`
    /// or `fan:<queue>`.
    async fn prefill(&mut self, key: &str, n: u64) -> Result<(), BoxError> {
        let (cfg, op) = match key.split_once(':') {
            // The POP cells' many-partition queues.
            Some(("qw", "cons_p1000" | "pgb_pop")) => (
                self.proxy_cfg.clone(),
                Op::QwPush {
                    queue: key[3..].into(),
                    batch: 100,
                    partitions: Some(MANY_PARTITIONS),
                    random: false,
                },
            ),
            Some(("qw", queue)) => (
                self.proxy_cfg.clone(),
                Op::QwPush {
                    queue: queue.into(),
                    batch: 100,
                    partitions: None,
                    random: false,
                },
            ),
            Some(("pgmq", queue)) => (
                self.direct_cfg.clone(),
                Op::PgmqSend {
                    queue: queue.into(),
                    batch: 100,
                },
            ),
            _ => self.prefill_other(key)?,
        };
        let slice = run_slice(
            SliceSpec {
                cfg: &cfg,
                ops: vec![op; 4],
                duration: Duration::from_secs(120),
                budget: Some(n),
                warmup: false,
                label: String::new(),
            },
            &self.payloads,
            self.probes,
        )
        .await;
        if let Some(e) = slice.error {
            return Err(format!("prefill of {key}: {e}").into());
        }
        *self.levels.entry(key.into()).or_insert(0) += slice.msgs;
        Ok(())
    }

    fn prefill_other(&self, key: &str) -> Result<(Config, Op), BoxError> {
        // "fan:<queue>": a fan-out queue of FANOUT_PARTITIONS partitions.
        let queue = key
            .strip_prefix("fan:")
            .ok_or_else(|| format!("unknown queue {key}"))?;
        Ok((
            self.proxy_cfg.clone(),
            Op::QwPush {
                queue: queue.into(),
                batch: 100,
                partitions: Some(FANOUT_PARTITIONS),
                random: false,
            },
        ))
    }

    fn estimate(&self, w: &str, system: &str, c: usize, default: f64) -> f64 {
        self.estimates
            .get(&(w.into(), system.into(), c))
            .copied()
            .unwrap_or(default)
    }

    async fn consume_workload(
        &mut self,
        w: &str,
        limit: usize,
        auto_ack: bool,
        c: usize,
        systems: &[(&str, &str)],
    ) -> Result<(), BoxError> {
        for round in 0..self.args.rounds {
            self.consume_round(w, limit, auto_ack, c, systems, round)
                .await?;
        }
        Ok(())
    }

    /// One round of a consume cell: a slice for each of `systems` in turn,
    /// each queue first topped up to about twice what its slice takes.
    async fn consume_round(
        &mut self,
        w: &str,
        limit: usize,
        auto_ack: bool,
        c: usize,
        systems: &[(&str, &str)],
        round: usize,
    ) -> Result<(), BoxError> {
        let secs = self.args.secs;
        for &(system, key) in systems {
            if !self.runs(system) {
                continue;
            }
            let default = if limit == 1 { 6_000.0 } else { 150_000.0 };
            let want = ((self.estimate(w, system, c, default) * secs * 2.0) as u64)
                .clamp(2_000, self.args.prefill_cap);
            let level = self.levels[key];
            if level < want {
                self.prefill(key, want - level).await?;
            }
            let level = self.levels[key];
            let (cfg, op) = match system {
                "pgmq" if auto_ack => (
                    self.direct_cfg.clone(),
                    Op::PgmqPop {
                        queue: key.trim_start_matches("pgmq:").into(),
                        limit,
                    },
                ),
                "pgmq" => (
                    self.direct_cfg.clone(),
                    Op::PgmqReadDelete {
                        queue: key.trim_start_matches("pgmq:").into(),
                        limit,
                    },
                ),
                _ => (
                    self.proxy_cfg.clone(),
                    Op::QwPop {
                        queue: key.trim_start_matches("qw:").into(),
                        limit,
                        auto_ack,
                        group: None,
                        wait: None,
                    },
                ),
            };
            let slice = run_slice(
                SliceSpec {
                    cfg: &cfg,
                    ops: vec![op; c],
                    duration: duration(secs),
                    budget: Some(level),
                    warmup: false,
                    label: format!("{w} C={c} {system}"),
                },
                &self.payloads,
                self.probes,
            )
            .await;
            let left = level.saturating_sub(slice.msgs);
            self.levels.insert(key.into(), left);
            if slice.error.is_none() && slice.msgs >= level {
                let note = "drained: prefill too small".to_string();
                self.cell(w, system, c).note = note;
            }
            self.record(w, system, c, round, slice);
        }
        Ok(())
    }

    // ---- job queue ---------------------------------------------------------

    /// `job.workers` workers on one queue without partition keys, each
    /// looping: take one job, work `job.work_ms` (a sleep), acknowledge it
    /// (in a transaction block it commits when `job.tx`). queenwire with a
    /// shared group (`ordered = false`), with the default ordered group, and
    /// pgmq; rounds interleaved. Each queue is prefilled with about twice
    /// the jobs its slice takes.
    async fn jobs_workload(&mut self, job: &JobCell) -> Result<(), BoxError> {
        let (w, c, tx) = (job.name, job.workers, job.tx);
        let work = Duration::from_millis(job.work_ms);
        let secs = if job.work_ms > 0 {
            self.args.secs.max(JOB_MIN_SECS)
        } else {
            self.args.secs
        };
        let systems = [
            ("queenwire", format!("qw:{w}_shared")),
            ("queenwire ordered", format!("qw:{w}_ordered")),
            ("pgmq", format!("pgmq:{w}")),
        ];
        for (system, key) in &systems {
            if !self.runs(system) {
                continue;
            }
            let (kind, queue) = key.split_once(':').ok_or("job queue key")?;
            match (kind, *system) {
                ("pgmq", _) => {
                    self.pg_admin
                        .execute("SELECT pgmq.create($1)", &[&queue])
                        .await?;
                }
                (_, "queenwire") => {
                    self.qw_admin
                        .simple_query(&format!("CREATE QUEUE {queue} WITH (ordered = false)"))
                        .await?;
                }
                _ => {
                    self.qw_admin
                        .simple_query(&format!("CREATE QUEUE {queue}"))
                        .await?;
                }
            }
            self.levels.insert(key.clone(), 0);
        }
        let in_tx = if tx { " in BEGIN … COMMIT" } else { "" };
        // At most one job per worker per `work`.
        let ceiling = if job.work_ms > 0 {
            c as f64 * 1000.0 / job.work_ms as f64
        } else {
            6_000.0
        };
        for round in 0..self.args.rounds {
            for (system, key) in &systems {
                let system = *system;
                if !self.runs(system) {
                    continue;
                }
                let want = ((self.estimate(w, system, c, ceiling) * secs * 2.0) as u64)
                    .clamp(2_000, self.args.prefill_cap);
                let level = self.levels[key];
                if level < want {
                    self.prefill(key, want - level).await?;
                }
                let level = self.levels[key];
                let queue = key.split_once(':').map_or("", |(_, q)| q).to_string();
                let (cfg, op, note) = if system == "pgmq" {
                    (
                        self.direct_cfg.clone(),
                        Op::PgmqJob { queue, work, tx },
                        format!(
                            "pgmq.read(q, 30, 1), {} ms sleep, pgmq.delete(q, id){in_tx}; an empty read sleeps {} ms",
                            job.work_ms,
                            ops::PGMQ_JOB_IDLE.as_millis()
                        ),
                    )
                } else {
                    let kind = if system == "queenwire" {
                        "WITH (ordered = false)"
                    } else {
                        "ordered (the default)"
                    };
                    (
                        self.proxy_cfg.clone(),
                        Op::QwJob {
                            queue,
                            wait: JOB_WAIT,
                            work,
                            tx,
                        },
                        format!(
                            "POP … LIMIT 1 WAIT '{JOB_WAIT}', {} ms sleep, ACK $1{in_tx}; queue {kind}, no partition key",
                            job.work_ms
                        ),
                    )
                };
                let slice = run_slice(
                    SliceSpec {
                        cfg: &cfg,
                        ops: vec![op; c],
                        duration: duration(secs),
                        budget: Some(level),
                        warmup: false,
                        label: format!("{w} C={c} {system}"),
                    },
                    &self.payloads,
                    self.probes,
                )
                .await;
                self.levels
                    .insert(key.clone(), level.saturating_sub(slice.msgs));
                let drained = slice.error.is_none() && slice.msgs >= level;
                let cell = self.cell(w, system, c);
                if drained || !cell.note.contains("drained") {
                    cell.note = if drained {
                        format!("{note}; drained: prefill too small")
                    } else {
                        note
                    };
                }
                self.record(w, system, c, round, slice);
            }
        }
        for (system, key) in &systems {
            if self.levels.remove(key).is_none() {
                continue;
            }
            let queue = key.split_once(':').map_or("", |(_, q)| q);
            if *system == "pgmq" {
                self.pg_admin
                    .execute("SELECT pgmq.drop_queue($1)", &[&queue])
                    .await?;
            } else {
                self.qw_admin
                    .simple_query(&format!("DROP QUEUE {queue}"))
                    .await?;
            }
        }
        Ok(())
    }

    // ---- fan-out -----------------------------------------------------------

    async fn fanout(&mut self, per_group: usize, round: usize) -> Result<(), BoxError> {
        let c = FANOUT_GROUPS * per_group;
        let w = "fanout";
        let system = "queenwire";
        let queue = self.next_name("fan");
        self.qw_admin
            .simple_query(&format!("CREATE QUEUE {queue}"))
            .await?;
        let total = ((self.estimate(w, system, c, 40_000.0) * self.args.secs * 2.0) as u64)
            .clamp(2_000, self.args.prefill_cap);
        let key = format!("fan:{queue}");
        self.prefill(&key, (total / FANOUT_GROUPS as u64).max(1_000))
            .await?;
        let stored = self.levels[&key];
        let ops: Vec<Op> = (0..c)
            .map(|i| Op::QwPop {
                queue: queue.clone(),
                limit: 100,
                auto_ack: false,
                group: Some(format!("g{}", i % FANOUT_GROUPS)),
                wait: None,
            })
            .collect();
        let cfg = self.proxy_cfg.clone();
        let slice = run_slice(
            SliceSpec {
                cfg: &cfg,
                ops,
                duration: duration(self.args.secs),
                budget: Some(stored * FANOUT_GROUPS as u64),
                warmup: false,
                label: format!("{w} C={c} {system}"),
            },
            &self.payloads,
            self.probes,
        )
        .await;
        self.qw_admin
            .simple_query(&format!("DROP QUEUE {queue}"))
            .await?;
        self.levels.remove(&key);
        self.cell(w, system, c).note = format!("{FANOUT_GROUPS} groups × {per_group} consumers, {FANOUT_PARTITIONS} partitions; deliveries/s");
        self.record(w, system, c, round, slice);
        Ok(())
    }

    // ---- end-to-end latency ----------------------------------------------

    async fn e2e(&mut self, queenwire: bool, round: usize) -> Result<(), BoxError> {
        let w = "e2e";
        let system = if queenwire { "queenwire" } else { "pgmq" };
        let queue = self.next_name("e2e");
        let total = (E2E_RATE as f64 * self.args.secs.max(1.0)) as u64;
        let (cfg, consumer_op) = if queenwire {
            self.qw_admin
                .simple_query(&format!("CREATE QUEUE {queue}"))
                .await?;
            (
                self.proxy_cfg.clone(),
                Op::QwPop {
                    queue: queue.clone(),
                    limit: 100,
                    auto_ack: false,
                    group: None,
                    wait: Some("1s"),
                },
            )
        } else {
            self.pg_admin
                .execute("SELECT pgmq.create($1)", &[&queue])
                .await?;
            (
                self.direct_cfg.clone(),
                Op::PgmqReadPoll {
                    queue: queue.clone(),
                    limit: 100,
                },
            )
        };
        let slice = e2e_slice(
            &cfg,
            queenwire,
            &queue,
            consumer_op,
            total,
            &self.payloads,
            self.probes,
        )
        .await;
        if queenwire {
            self.qw_admin
                .simple_query(&format!("DROP QUEUE {queue}"))
                .await?;
        } else {
            self.pg_admin
                .execute("SELECT pgmq.drop_queue($1)", &[&queue])
                .await?;
        }
        let note = if queenwire {
            format!("{E2E_RATE} msg/s offered by {E2E_PRODUCERS} producers (1 per PUSH); {E2E_CONSUMERS} consumers in POP … LIMIT 100 WAIT 1s + ACK; {E2E_PARTITIONS} partitions; latency = push commit → delivery")
        } else {
            format!("same offer via pgmq.send; {E2E_CONSUMERS} consumers in pgmq.read_with_poll(…, 100, 1 s, poll 10 ms) + delete")
        };
        self.cell(w, system, E2E_CONSUMERS).note = note;
        self.record(w, system, E2E_CONSUMERS, round, slice);
        Ok(())
    }
}

/// Producers offer `total` messages at E2E_RATE; consumers long-poll. The
/// latency of a message is its delivery instant minus the instant its
/// producer saw the push commit (0 when delivery came first).
async fn e2e_slice(
    cfg: &Config,
    queenwire: bool,
    queue: &str,
    consumer_op: Op,
    total: u64,
    payloads: &Arc<Payloads>,
    probes: Probes,
) -> Slice {
    let mut slice = Slice::default();
    let result: Result<(), BoxError> = async {
        let committed: Arc<Vec<AtomicU64>> =
            Arc::new((0..total).map(|_| AtomicU64::new(0)).collect());
        let delivered: Arc<Vec<AtomicU64>> =
            Arc::new((0..total).map(|_| AtomicU64::new(0)).collect());
        let mut consumers = Vec::new();
        for i in 0..E2E_CONSUMERS {
            consumers.push(Worker::new(cfg, consumer_op.clone(), payloads.clone(), i).await?);
        }
        let mut producers = Vec::new();
        for _ in 0..E2E_PRODUCERS {
            producers.push(SeqProducer::new(cfg, queenwire, queue, E2E_PARTITIONS).await?);
        }
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let base = Instant::now();
        let cpu0 = probes.sample();
        let since = move |t: Instant| (t - base).as_nanos() as u64 + 1;
        let mut tasks = tokio::task::JoinSet::new();
        for mut w in consumers {
            let (stop, delivered) = (stop.clone(), delivered.clone());
            tasks.spawn(async move {
                let mut seqs = Vec::new();
                let hard_stop = base
                    + Duration::from_secs_f64(total as f64 / E2E_RATE as f64)
                    + Duration::from_secs(10);
                while !stop.load(Ordering::Relaxed) && Instant::now() < hard_stop {
                    seqs.clear();
                    match tokio::time::timeout(runner::OP_TIMEOUT, w.run_once(Some(&mut seqs)))
                        .await
                    {
                        Ok(Ok(_)) => {
                            let now = since(Instant::now());
                            for &s in &seqs {
                                if let Some(slot) = delivered.get(s as usize) {
                                    let _ = slot.compare_exchange(
                                        0,
                                        now,
                                        Ordering::Relaxed,
                                        Ordering::Relaxed,
                                    );
                                }
                            }
                        }
                        Ok(Err(e)) => return Err(setup::describe(&*e)),
                        Err(_) => return Err("a consumer request timed out".to_string()),
                    }
                }
                Ok(())
            });
        }
        let next = Arc::new(AtomicU64::new(0));
        let mut producing = tokio::task::JoinSet::new();
        for mut p in producers {
            let (next, committed) = (next.clone(), committed.clone());
            producing.spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= total {
                        return Ok::<(), String>(());
                    }
                    let due = base + Duration::from_secs_f64(i as f64 / E2E_RATE as f64);
                    tokio::time::sleep_until(due.into()).await;
                    tokio::time::timeout(runner::OP_TIMEOUT, p.push(i))
                        .await
                        .map_err(|_| "a push timed out".to_string())?
                        .map_err(|e| setup::describe(&*e))?;
                    committed[i as usize].store(since(Instant::now()), Ordering::Relaxed);
                }
            });
        }
        let mut error = None;
        while let Some(r) = producing.join_next().await {
            if let Ok(Err(e)) | Err(e) = r.map_err(|e| e.to_string()) {
                error.get_or_insert(e);
            }
        }
        // Let the consumers catch up (bounded), then stop them.
        let grace = Instant::now() + Duration::from_secs(5);
        while Instant::now() < grace && delivered.iter().any(|d| d.load(Ordering::Relaxed) == 0) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let end = Instant::now();
        stop.store(true, Ordering::Relaxed);
        while let Some(r) = tasks.join_next().await {
            if let Ok(Err(e)) | Err(e) = r.map_err(|e| e.to_string()) {
                error.get_or_insert(e);
            }
        }
        slice.cpu = probes.sample() - cpu0;
        slice.elapsed = end - base;
        let mut missing = 0;
        for i in 0..total as usize {
            let d = delivered[i].load(Ordering::Relaxed);
            let c = committed[i].load(Ordering::Relaxed);
            if d == 0 || c == 0 {
                missing += 1;
                continue;
            }
            slice.msgs += 1;
            slice
                .lat_us
                .push((d.saturating_sub(c) / 1000).min(u32::MAX as u64) as u32);
        }
        slice.ops = slice.msgs;
        if let Some(e) = error {
            return Err(e.into());
        }
        if missing > 0 {
            return Err(format!("{missing} of {total} messages not delivered within 5 s").into());
        }
        Ok(())
    }
    .await;
    if let Err(e) = result {
        slice.error = Some(e.to_string());
    }
    slice
}

// ---- report ---------------------------------------------------------------

fn fmt_rate(r: f64) -> String {
    let r = r.round() as u64;
    let s = r.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

fn fmt_ms(us: Option<f64>) -> String {
    us.map_or("–".into(), |u| format!("{:.2}", u / 1000.0))
}

fn per_msg(cpu_us: u64, msgs: u64) -> String {
    if msgs == 0 {
        "–".into()
    } else {
        format!("{:.0}", cpu_us as f64 / msgs as f64)
    }
}

fn print_report(bench: &Bench, rss: Option<f64>, h: &Header) {
    let (cells, extras) = (&bench.cells[..], &bench.extras);
    println!("## queenwire-bench");
    println!();
    println!(
        "{}; PostgreSQL {} (embedded, fresh data directory, synchronous_commit=on); pgmq {} (SQL from the pgmq crate 0.33.7); queenwire --pool-size {}; every client, and queenwire's backend connections, over {}; {} round(s) × {:.1} s per cell, systems alternating within each round; run took {:.0} s.",
        h.machine, h.pg_version, h.pgmq_version, h.args.pool_size, h.args.transport.name(), h.args.rounds, h.args.secs, h.elapsed.as_secs_f64()
    );
    println!();
    if bench.busy.is_empty() {
        println!("Quiet-machine check: the machine was quiet before every cell.");
    } else {
        for (cell, why) in &bench.busy {
            println!("WARNING: the machine was busy before {cell}: {why}; its figures may be low.");
        }
    }
    println!();
    println!("| workload | system | C | msgs/s (median) | min–max | p50 ms | p99 ms | CPU µs/msg: postgres | proxy | client | notes |");
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    for cell in cells {
        let rates = cell.rates();
        let errors: Vec<&str> = cell
            .slices
            .iter()
            .filter_map(|s| s.error.as_deref())
            .collect();
        let (med, spread) = if rates.is_empty() {
            ("error".to_string(), "–".to_string())
        } else {
            let m = median(&mut rates.clone());
            let (lo, hi) = rates
                .iter()
                .fold((f64::MAX, 0f64), |(l, h), &r| (l.min(r), h.max(r)));
            (fmt_rate(m), format!("{}–{}", fmt_rate(lo), fmt_rate(hi)))
        };
        let mut lat: Vec<u32> = cell
            .slices
            .iter()
            .filter(|s| s.error.is_none())
            .flat_map(|s| s.lat_us.iter().copied())
            .collect();
        lat.sort_unstable();
        let ok: Vec<&Slice> = cell.slices.iter().filter(|s| s.error.is_none()).collect();
        let msgs: u64 = ok.iter().map(|s| s.msgs).sum();
        let cpu = ok.iter().fold(Cpu::default(), |a, s| Cpu {
            postgres: a.postgres + s.cpu.postgres,
            proxy: a.proxy + s.cpu.proxy,
            client: a.client + s.cpu.client,
        });
        let uses_proxy = cell.system.starts_with("queenwire");
        let mut note = cell.note.clone();
        if let (Some(p), Some(job)) = (parallelism(cell), job_cell(&cell.workload)) {
            note.push_str(&format!(
                "; parallelism {p:.1} (jobs/s × {:.3} s, at most {})",
                job.work_ms as f64 / 1000.0,
                job.workers
            ));
        }
        if !errors.is_empty() {
            if !note.is_empty() {
                note.push_str("; ");
            }
            note.push_str(&format!(
                "{} round(s) failed: {}",
                errors.len(),
                errors[0].replace('|', "/")
            ));
        }
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            cell.workload,
            cell.system,
            cell.c,
            med,
            spread,
            fmt_ms(percentile(&lat, 0.50)),
            fmt_ms(percentile(&lat, 0.99)),
            per_msg(cpu.postgres, msgs),
            if uses_proxy {
                per_msg(cpu.proxy, msgs)
            } else {
                "–".into()
            },
            per_msg(cpu.client, msgs),
            note
        );
    }
    println!();
    println!("min–max: the slowest and fastest round. CPU: /proc times of the cluster's processes, the queenwire process and this load generator over the timed part, per message moved (per request for select1).");
    println!();
    print_jobs(cells);

    print_extras(extras);

    let c = if h.args.concurrency.contains(&8) {
        8
    } else {
        *h.args.concurrency.iter().max().unwrap_or(&8)
    };
    let rate_at = |w: &str, s: &str, c: usize| {
        cells
            .iter()
            .find(|x| x.workload == w && x.system == s && x.c == c)
            .and_then(Cell::median_rate)
    };
    let rate = |w: &str, s: &str| rate_at(w, s, c);
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
        _ => "n/a".into(),
    };
    let job_parallelism = |w: &str, s: &str| {
        cells
            .iter()
            .find(|x| x.workload == w && x.system == s)
            .and_then(parallelism)
            .map_or("n/a".into(), |p| format!("{p:.1}"))
    };
    let e2e = |s: &str, p: f64| {
        cells
            .iter()
            .find(|x| x.workload == "e2e" && x.system == s)
            .map(|x| {
                let mut l: Vec<u32> = x
                    .slices
                    .iter()
                    .filter(|s| s.error.is_none())
                    .flat_map(|s| s.lat_us.iter().copied())
                    .collect();
                l.sort_unstable();
                percentile(&l, p).map_or("n/a".into(), |v| format!("{:.1}", v / 1000.0))
            })
            .unwrap_or_else(|| "n/a".into())
    };
    let pairs = [
        (
            "push100_vs_pgmq",
            ratio(rate("push100", "queenwire"), rate("push100", "pgmq")),
        ),
        (
            "push100_vs_insert",
            ratio(rate("push100", "queenwire"), rate("push100", "INSERT")),
        ),
        (
            "push1_vs_pgmq",
            ratio(rate("push1", "queenwire"), rate("push1", "pgmq")),
        ),
        (
            "push1_vs_insert",
            ratio(rate("push1", "queenwire"), rate("push1", "INSERT")),
        ),
        (
            "popack100_vs_pgmq",
            ratio(
                rate("popack100", "queenwire 1000p"),
                rate("popack100", "pgmq"),
            ),
        ),
        (
            "popack100_1p_vs_pgmq",
            ratio(rate("popack100", "queenwire 1p"), rate("popack100", "pgmq")),
        ),
        (
            "popack1_vs_pgmq",
            ratio(rate("popack1", "queenwire 1000p"), rate("popack1", "pgmq")),
        ),
        (
            "popack1_1p_shared_vs_pgmq",
            ratio(
                rate("popack1_1p_shared", "queenwire 1p shared"),
                rate("popack1_1p_shared", "pgmq"),
            ),
        ),
        (
            "popack100_1p_shared_vs_pgmq",
            ratio(
                rate("popack100_1p_shared", "queenwire 1p shared"),
                rate("popack100_1p_shared", "pgmq"),
            ),
        ),
        (
            "jobs8_20ms_vs_pgmq",
            ratio(
                rate_at("jobs8_20ms", "queenwire", 8),
                rate_at("jobs8_20ms", "pgmq", 8),
            ),
        ),
        (
            "jobs8_20ms_parallelism",
            job_parallelism("jobs8_20ms", "queenwire"),
        ),
        (
            "jobs8_20ms_ordered_parallelism",
            job_parallelism("jobs8_20ms", "queenwire ordered"),
        ),
        (
            "jobs8_20ms_pgmq_parallelism",
            job_parallelism("jobs8_20ms", "pgmq"),
        ),
        (
            "jobs8_20ms_tx_vs_pgmq",
            ratio(
                rate_at("jobs8_20ms_tx", "queenwire", 8),
                rate_at("jobs8_20ms_tx", "pgmq", 8),
            ),
        ),
        (
            "jobs8_20ms_tx_parallelism",
            job_parallelism("jobs8_20ms_tx", "queenwire"),
        ),
        (
            "jobs8_20ms_tx_pgmq_parallelism",
            job_parallelism("jobs8_20ms_tx", "pgmq"),
        ),
        (
            "jobs64_0ms_vs_pgmq",
            ratio(
                rate_at("jobs64_0ms", "queenwire", 64),
                rate_at("jobs64_0ms", "pgmq", 64),
            ),
        ),
        (
            "autoack100_vs_pgmq_pop",
            ratio(
                rate("autoack100", "queenwire 1000p"),
                rate("autoack100", "pgmq"),
            ),
        ),
        (
            "autoack1_vs_pgmq_pop",
            ratio(
                rate("autoack1", "queenwire 1000p"),
                rate("autoack1", "pgmq"),
            ),
        ),
        (
            "push1_nq_vs_pgmq",
            ratio(rate("push1_nq", "queenwire"), rate("push1_nq", "pgmq")),
        ),
        (
            "push1_100p_vs_pgmq",
            ratio(rate("push1_100p", "queenwire"), rate("push1_100p", "pgmq")),
        ),
        (
            "push100_100p_vs_pgmq",
            ratio(
                rate("push100_100p", "queenwire"),
                rate("push100_100p", "pgmq"),
            ),
        ),
        (
            "push100_100p_vs_insert",
            ratio(
                rate("push100_100p", "queenwire"),
                rate("push100_100p", "INSERT"),
            ),
        ),
        (
            "push1_text_vs_pgmq",
            ratio(rate("push1_text", "queenwire"), rate("push1_text", "pgmq")),
        ),
        (
            "push100_text_vs_pgmq",
            ratio(
                rate("push100_text", "queenwire"),
                rate("push100_text", "pgmq"),
            ),
        ),
        ("pop_scale", pop_scale(extras)),
        (
            "provision_partitions_per_s",
            extras
                .provisioning
                .iter()
                .max_by_key(|(n, _)| *n)
                .map_or("n/a".into(), |(_, r)| format!("{r:.0}")),
        ),
        (
            "provision_batch_partitions_per_s",
            extras
                .provisioning_batch
                .map_or("n/a".into(), |(_, _, r)| format!("{r:.0}")),
        ),
        (
            "provision_c32_partitions_per_s",
            extras
                .provisioning_many
                .map_or("n/a".into(), |(_, _, r)| format!("{r:.0}")),
        ),
        ("tpcb_vs_direct", tpcb_ratio(extras, "queenwire")),
        (
            "stream_5k_max_lag",
            extras
                .stream
                .as_ref()
                .map_or("n/a".into(), |s| format!("{} msgs", s.max_lag)),
        ),
        (
            "overhead_vs_direct",
            ratio(rate("push100", "queenwire"), rate("push100", "direct")),
        ),
        (
            "overhead1_vs_direct",
            ratio(rate("push1", "queenwire"), rate("push1", "direct")),
        ),
        (
            "select1_vs_direct",
            ratio(rate("select1", "queenwire"), rate("select1", "direct")),
        ),
        (
            "overhead_c1_vs_direct",
            ratio(
                rate_at("push100", "queenwire", 1),
                rate_at("push100", "direct", 1),
            ),
        ),
        (
            "select1_c1_vs_direct",
            ratio(
                rate_at("select1", "queenwire", 1),
                rate_at("select1", "direct", 1),
            ),
        ),
        ("e2e_p50_ms", e2e("queenwire", 0.5)),
        ("e2e_p99_ms", e2e("queenwire", 0.99)),
        ("pgmq_e2e_p50_ms", e2e("pgmq", 0.5)),
        ("pgmq_e2e_p99_ms", e2e("pgmq", 0.99)),
        (
            "queenwire_peak_rss_mb",
            rss.map_or("n/a".into(), |r| format!("{r:.1}")),
        ),
        (
            "idle1000_rss_mb",
            extras
                .idle_rss_mb
                .map_or("n/a".into(), |(with, _)| format!("{with:.1}")),
        ),
    ];
    let mut line: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let native = |w: &str, s: &str| rate(w, s);
    for (k, v) in bench.pgbench.print(&native) {
        line.push(format!("{k}={v}"));
    }
    println!("ratios (C={c}): see above; the line below is the machine-readable summary.");
    println!();
    println!("ratios: {}", line.join(" "));
}

fn job_cell(workload: &str) -> Option<&'static JobCell> {
    JOB_CELLS.iter().find(|j| j.name == workload)
}

/// How many workers of a job cell were busy on average: its median jobs/s
/// × the work of one job (None for cells without work).
fn parallelism(cell: &Cell) -> Option<f64> {
    let job = job_cell(&cell.workload).filter(|j| j.work_ms > 0)?;
    Some(cell.median_rate()? * job.work_ms as f64 / 1000.0)
}

/// The job cells: jobs/s per system, median and min–max over the rounds,
/// and the parallelism.
fn print_jobs(cells: &[Cell]) {
    let jobs: Vec<&Cell> = cells
        .iter()
        .filter(|c| job_cell(&c.workload).is_some())
        .collect();
    if jobs.is_empty() {
        return;
    }
    println!("Job queue: workers on one queue without partition keys, each taking one job, working (a sleep), acknowledging it; jobs/s, median (min–max) over the rounds, and parallelism = jobs/s × the work of one job (how many workers were busy on average):");
    println!();
    println!("| cell | system | workers | jobs/s | min–max | parallelism |");
    println!("|---|---|---:|---:|---:|---:|");
    for cell in jobs {
        let rates = cell.rates();
        let (lo, hi) = rates
            .iter()
            .fold((f64::MAX, 0f64), |(l, h), &r| (l.min(r), h.max(r)));
        println!(
            "| {} | {} | {} | {} | {} | {} |",
            cell.workload,
            cell.system,
            cell.c,
            cell.median_rate().map_or("error".into(), fmt_rate),
            if rates.is_empty() {
                "–".into()
            } else {
                format!("{}–{}", fmt_rate(lo), fmt_rate(hi))
            },
            parallelism(cell).map_or("–".into(), |p| format!("{p:.1}"))
        );
    }
    println!();
}

/// POP latency at the fewest partitions ÷ at the most (1.0: flat).
fn pop_scale(extras: &extra::Extras) -> String {
    let first = extras.pop_latency.iter().min_by_key(|(n, _, _)| *n);
    let last = extras.pop_latency.iter().max_by_key(|(n, _, _)| *n);
    match (first, last) {
        (Some((a, la, _)), Some((b, lb, _))) if a != b && *lb > 0.0 => format!("{:.2}", la / lb),
        _ => "n/a".into(),
    }
}

/// Median TPC-B tps through queenwire ÷ median direct.
fn tpcb_ratio(extras: &extra::Extras, through: &str) -> String {
    let of = |s: &str| {
        let mut v: Vec<f64> = extras
            .tpcb
            .iter()
            .filter(|(x, _)| *x == s)
            .map(|(_, t)| *t)
            .collect();
        (!v.is_empty()).then(|| median(&mut v))
    };
    match (of(through), of("direct")) {
        (Some(q), Some(d)) if d > 0.0 => format!("{:.2}", q / d),
        _ => "n/a".into(),
    }
}

fn print_extras(extras: &extra::Extras) {
    if !extras.pop_latency.is_empty() {
        println!("POP latency against partitions (one client, `POP FROM q LIMIT 1 AUTO ACK`, extended protocol), and the rate at which pushing one message into each new partition made them (8 clients):");
        println!();
        println!("| partitions | POP p50 ms | POP p99 ms | provisioning partitions/s |");
        println!("|---:|---:|---:|---:|");
        for (n, p50, p99) in &extras.pop_latency {
            let prov = extras
                .provisioning
                .iter()
                .find(|(m, _)| m == n)
                .map_or("–".into(), |(_, r)| format!("{r:.0}"));
            println!(
                "| {n} | {:.2} | {:.2} | {prov} |",
                p50 / 1000.0,
                p99 / 1000.0
            );
        }
        println!();
    }
    if let Some((n, batch, rate)) = extras.provisioning_batch {
        println!("Provisioning {n} partitions with {batch} rows per statement, each row a new partition (`PUSH INTO q (partition, payload) VALUES …`, 8 clients): {rate:.0} partitions/s");
        println!();
    }
    if let Some((clients, n, rate)) = extras.provisioning_many {
        println!("Provisioning {n} partitions with one message per statement into a new partition, {clients} clients: {rate:.0} partitions/s");
        println!();
    }
    if !extras.tpcb.is_empty() {
        let list = |s: &str| {
            extras
                .tpcb
                .iter()
                .filter(|(x, _)| *x == s)
                .map(|(_, t)| format!("{t:.0}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        println!(
            "TPC-B (pgbench's built-in script, scale 10, 8 clients, 2 threads, simple protocol), tps per round: direct {}; through queenwire {}.",
            list("direct"),
            list("queenwire")
        );
        println!();
    }
    if let Some((with, before)) = extras.idle_rss_mb {
        println!(
            "queenwire RSS with {} idle clients (startup done, silent): {with:.1} MB ({before:.1} MB before).",
            extra::IDLE_CLIENTS
        );
        println!();
    }
    for n in &extras.notes {
        println!("note: {n}");
    }
    if !extras.notes.is_empty() {
        println!();
    }
}
