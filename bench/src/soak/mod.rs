//! `--soak MINUTES`: resource bounds over time, not run by CI.
//!
//! One queenwire in front of one embedded PostgreSQL, then three parts in
//! turn on that same process:
//!
//! 1. load: a steady offered mix for MINUTES — PUSH (one message per
//!    statement, every other one with a transaction id, over `--partitions`
//!    partitions), POP + ACK by `--consumers` consumers of one group, KV
//!    PUT/GET over 1,000 keys, and passthrough (an upsert and a SELECT on a
//!    1,000-row table) — with retention on and short (the queue has
//!    `completed_retention_seconds = 60`, queenwire runs with
//!    `--retention-interval`). One line a minute: queenwire's RSS and open
//!    descriptors, the queen tables' sizes, the segment count, the backlog
//!    and p50/p99 per statement kind; a summary at the end.
//! 2. idle: `--idle` connections that finish startup and then say nothing;
//!    queenwire's RSS and descriptors with them open, and the time for one
//!    more client to connect and run `SELECT 1`.
//! 3. churn: `--churn-rounds` rounds of `--churn-clients` clients that
//!    connect, run `SELECT 1` and disconnect; RSS and descriptors before and
//!    after each round.
//!
//! Every loop is bounded (the load by its minutes, the parts by counts and
//! timeouts, the whole run by a watchdog); traffic stays on loopback.

pub(crate) mod conns;
mod load;

use crate::procfs;
use crate::setup::{self, BoxError};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_postgres::{Client, Config};

pub const USAGE: &str = "\
usage: queenwire-bench --soak MINUTES [--push-rate N] [--kv-rate N] [--sql-rate N]
                       [--consumers N] [--partitions N] [--retention-interval S]
                       [--idle N] [--churn-rounds N] [--churn-clients N]
                       [--parts load,idle,churn] [--pool-size N] [--queenwire PATH] [--keep]

  --soak MINUTES        length of the load part (default 30 when given without a number)
  --push-rate N         PUSH statements/s offered, one message each (default 100)
  --kv-rate N           KV statements/s offered, half PUT, half GET (default 100)
  --sql-rate N          passthrough statements/s, half upsert, half SELECT (default 50)
  --consumers N         POP + ACK consumers of one group (default 3)
  --partitions N        partitions the pushes are spread over (default 100)
  --retention-interval  queenwire's retention cycle in seconds (default 10)
  --idle N              idle client connections of the idle part (default 10000)
  --churn-rounds N      rounds of the churn part (default 5)
  --churn-clients N     clients per churn round (default 1000)
  --parts               which parts to run (default all three)";

#[derive(Debug, Clone)]
pub struct SoakArgs {
    minutes: u64,
    push_rate: u64,
    kv_rate: u64,
    sql_rate: u64,
    consumers: usize,
    partitions: usize,
    retention_interval: u64,
    idle: usize,
    churn_rounds: usize,
    churn_clients: usize,
    parts: Vec<String>,
    pool_size: usize,
    queenwire: Option<PathBuf>,
    keep: bool,
}

pub fn parse_args(args: &[String]) -> Result<SoakArgs, String> {
    let mut a = SoakArgs {
        minutes: 30,
        push_rate: 100,
        kv_rate: 100,
        sql_rate: 50,
        consumers: 3,
        partitions: 100,
        retention_interval: 10,
        idle: 10_000,
        churn_rounds: 5,
        churn_clients: 1000,
        parts: vec!["load".into(), "idle".into(), "churn".into()],
        pool_size: 16,
        queenwire: None,
        keep: false,
    };
    let mut it = args.iter().peekable();
    while let Some(arg) = it.next() {
        let mut num = |name: &str| -> Result<u64, String> {
            it.next()
                .ok_or(format!("{name} needs a value"))?
                .parse::<u64>()
                .map_err(|e| format!("{name}: {e}"))
        };
        match arg.as_str() {
            "--soak" => {
                if let Some(m) = it.peek().and_then(|v| v.parse::<u64>().ok()) {
                    a.minutes = m;
                    it.next();
                }
            }
            "--push-rate" => a.push_rate = num(arg)?,
            "--kv-rate" => a.kv_rate = num(arg)?,
            "--sql-rate" => a.sql_rate = num(arg)?,
            "--consumers" => a.consumers = num(arg)? as usize,
            "--partitions" => a.partitions = num(arg)? as usize,
            "--retention-interval" => a.retention_interval = num(arg)?,
            "--idle" => a.idle = num(arg)? as usize,
            "--churn-rounds" => a.churn_rounds = num(arg)? as usize,
            "--churn-clients" => a.churn_clients = num(arg)? as usize,
            "--pool-size" => a.pool_size = num(arg)? as usize,
            "--parts" => {
                let v = it.next().ok_or("--parts needs a value")?;
                a.parts = v.split(',').map(|s| s.trim().to_string()).collect();
                if let Some(bad) = a
                    .parts
                    .iter()
                    .find(|p| !["load", "idle", "churn"].contains(&p.as_str()))
                {
                    return Err(format!("unknown part {bad}"));
                }
            }
            "--queenwire" => {
                a.queenwire = Some(PathBuf::from(it.next().ok_or("--queenwire needs a value")?))
            }
            "--keep" => a.keep = true,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other} (soak mode)")),
        }
    }
    if !(1..=240).contains(&a.minutes)
        || a.push_rate > 5000
        || a.kv_rate > 5000
        || a.sql_rate > 5000
        || !(1..=64).contains(&a.consumers)
        || !(1..=10_000).contains(&a.partitions)
        || a.retention_interval == 0
        || a.idle > 100_000
        || a.churn_rounds > 100
        || a.churn_clients > 100_000
        || a.pool_size == 0
    {
        return Err("minutes 1-240, rates up to 5000/s, consumers 1-64, partitions 1-10000, idle up to 100000, churn rounds up to 100".into());
    }
    Ok(a)
}

fn wants(a: &SoakArgs, part: &str) -> bool {
    a.parts.iter().any(|p| p == part)
}

/// The statement kinds whose latency is reported.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Kind {
    Push,
    Pop,
    Ack,
    KvPut,
    KvGet,
    SqlUpsert,
    SqlSelect,
}

const KINDS: [Kind; 7] = [
    Kind::Push,
    Kind::Pop,
    Kind::Ack,
    Kind::KvPut,
    Kind::KvGet,
    Kind::SqlUpsert,
    Kind::SqlSelect,
];

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Push => "push",
            Kind::Pop => "pop",
            Kind::Ack => "ack",
            Kind::KvPut => "kv put",
            Kind::KvGet => "kv get",
            Kind::SqlUpsert => "sql upsert",
            Kind::SqlSelect => "sql select",
        }
    }
}

/// Latencies (µs) of the current minute, errors and counters of the run.
#[derive(Default)]
struct Stats {
    minute: Mutex<HashMap<Kind, Vec<u32>>>,
    errors: AtomicU64,
    pushed: AtomicU64,
    acked: AtomicU64,
    /// Statements that started more than a second after their due time.
    late: AtomicU64,
    shown_errors: AtomicU64,
}

impl Stats {
    fn record(&self, kind: Kind, started: Instant) {
        let us = started.elapsed().as_micros().min(u32::MAX as u128) as u32;
        if let Ok(mut m) = self.minute.lock() {
            m.entry(kind).or_default().push(us);
        }
    }

    fn error(&self, kind: Kind, e: &BoxError) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        if self.shown_errors.fetch_add(1, Ordering::Relaxed) < 20 {
            eprintln!("soak: {} error: {}", kind.label(), setup::describe(&**e));
        }
    }

    fn take(&self) -> HashMap<Kind, Vec<u32>> {
        self.minute
            .lock()
            .map(|mut m| std::mem::take(&mut *m))
            .unwrap_or_default()
    }
}

const QUEUE: &str = "soak";
const GROUP: &str = "workers";
const KEYS: u64 = 1000;
const RATE_CONNS: usize = 2;
const PUSH_CONNS: usize = 4;

pub async fn run(args: SoakArgs) -> Result<(), BoxError> {
    let pids = Arc::new((AtomicU64::new(0), AtomicU64::new(0)));
    // The load, plus 15 minutes for setup, idle and churn.
    crate::watchdog(Duration::from_secs(60 * args.minutes + 900), pids.clone());
    let nofile = procfs::raise_nofile();
    eprintln!("soak: this process's RLIMIT_NOFILE is now {nofile}");
    let binary = setup::queenwire_binary(args.queenwire.as_deref())?;
    eprintln!("soak: starting PostgreSQL (fresh data directory)");
    let cluster = setup::start_cluster().await?;
    pids.1.store(u64::from(cluster.pg.pid()), Ordering::Relaxed);
    let result = async {
        let pg_admin = setup::connect(&cluster.pg.client_config()).await?;
        pg_admin
            .batch_execute(
                "CREATE TABLE soak_items (k int PRIMARY KEY, n bigint NOT NULL, note text NOT NULL, \
                 updated_at timestamptz NOT NULL DEFAULT now())",
            )
            .await?;
        let max_conn = 1000 + args.idle + args.churn_clients;
        let extra = vec![
            "--retention-interval".to_string(),
            args.retention_interval.to_string(),
            "--max-connections".to_string(),
            max_conn.to_string(),
        ];
        eprintln!(
            "soak: starting {} --pool-size {} {}",
            binary.display(),
            args.pool_size,
            extra.join(" ")
        );
        let proxy = setup::start_proxy(
            &binary,
            &cluster.conninfo(crate::Transport::Unix),
            args.pool_size,
            &cluster.dir,
            &extra,
            true,
        )
        .await?;
        let pid = proxy.pid;
        pids.0.store(u64::from(pid), Ordering::Relaxed);
        let proxy_nofile = std::fs::read_to_string(format!("/proc/{pid}/limits"))
            .ok()
            .and_then(|t| {
                t.lines()
                    .find(|l| l.starts_with("Max open files"))
                    .map(|l| l.split_whitespace().nth(3).unwrap_or("?").to_string())
            })
            .unwrap_or_else(|| "?".into());
        println!("## queenwire-bench --soak");
        println!();
        println!(
            "{}; PostgreSQL {}; queenwire --pool-size {} {}; queenwire's RLIMIT_NOFILE {proxy_nofile}, the bench's {nofile}.",
            procfs::machine(),
            cluster.version,
            args.pool_size,
            extra.join(" ")
        );
        println!();
        let cfg = proxy.client_config();
        let outcome = tokio::select! {
            r = parts(&args, &cfg, &pg_admin, pid, proxy.addr) => r,
            _ = tokio::signal::ctrl_c() => Err("interrupted".into()),
        };
        proxy.stop().await;
        outcome
    }
    .await;
    cluster.stop(args.keep);
    result
}

async fn parts(
    args: &SoakArgs,
    cfg: &Config,
    pg_admin: &Client,
    pid: u32,
    addr: SocketAddr,
) -> Result<(), BoxError> {
    if wants(args, "load") {
        load::load(args, cfg, pg_admin, pid).await?;
    }
    if wants(args, "idle") {
        conns::idle(args.idle, cfg, pid, addr).await?;
    }
    if wants(args, "churn") {
        conns::churn(args.churn_rounds, args.churn_clients, cfg, pid).await?;
    }
    Ok(())
}

fn rss_mb(pid: u32) -> f64 {
    procfs::status_kb(pid, "VmRSS").map_or(0.0, |kb| kb as f64 / 1024.0)
}

fn fds(pid: u32) -> usize {
    procfs::fd_count(pid).unwrap_or(0)
}

fn mb(bytes: i64) -> f64 {
    bytes as f64 / 1024.0 / 1024.0
}
