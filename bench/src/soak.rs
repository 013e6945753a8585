//! `--soak MINUTES`: resource bounds over time (issue 17, item 4), not CI.
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

use crate::payload::payload;
use crate::pgtypes::Json;
use crate::procfs;
use crate::runner::percentile;
use crate::setup::{self, BoxError};
use bytes::{Buf, BytesMut};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_postgres::{Client, Config, Statement};

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
            &cluster.conninfo(),
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
        load(args, cfg, pg_admin, pid).await?;
    }
    if wants(args, "idle") {
        idle(args.idle, cfg, pid, addr).await?;
    }
    if wants(args, "churn") {
        churn(args.churn_rounds, args.churn_clients, cfg, pid).await?;
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

// ---- part 1: load ---------------------------------------------------------

/// One minute's line.
struct Minute {
    minute: u64,
    rss: f64,
    fds: usize,
    sizes: Sizes,
    backlog: i64,
    lat: HashMap<Kind, (f64, f64, usize)>,
    errors: u64,
}

#[derive(Default, Clone, Copy)]
struct Sizes {
    segments: i64,
    txns: i64,
    /// log_segments + log_txns + log_partitions + log_consumers + log_dlq.
    log_total: i64,
    segment_rows: i64,
    kv: i64,
    retention_history: i64,
    items: i64,
}

const SIZES_SQL: &str = "SELECT \
    pg_total_relation_size('queen.log_segments'), \
    pg_total_relation_size('queen.log_txns'), \
    pg_total_relation_size('queen.log_segments') + pg_total_relation_size('queen.log_txns') \
      + pg_total_relation_size('queen.log_partitions') + pg_total_relation_size('queen.log_consumers') \
      + COALESCE(pg_total_relation_size(to_regclass('queen.log_dlq')), 0), \
    (SELECT count(*) FROM queen.log_segments), \
    COALESCE(pg_total_relation_size(to_regclass('queen.kv')), 0), \
    COALESCE(pg_total_relation_size(to_regclass('queen.retention_history')), 0), \
    pg_total_relation_size('soak_items')";

async fn sizes(pg: &Client) -> Result<Sizes, BoxError> {
    let r = pg.query_one(SIZES_SQL, &[]).await?;
    Ok(Sizes {
        segments: r.try_get(0)?,
        txns: r.try_get(1)?,
        log_total: r.try_get::<_, Option<i64>>(2)?.unwrap_or(0),
        segment_rows: r.try_get(3)?,
        kv: r.try_get(4)?,
        retention_history: r.try_get(5)?,
        items: r.try_get(6)?,
    })
}

/// A connection offering one statement family at a share of a fixed rate.
enum Family {
    Push,
    Kv,
    Sql,
}

struct RateConn {
    client: Client,
    family: Family,
    stmts: Vec<Statement>,
    partitions: usize,
}

impl RateConn {
    async fn new(cfg: &Config, family: Family, partitions: usize) -> Result<RateConn, BoxError> {
        let client = setup::connect(cfg).await?;
        let sql: &[&str] = match family {
            Family::Push => &[
                "PUSH INTO soak PARTITION $1 VALUES ($2)",
                "PUSH INTO soak PARTITION $1 (payload, transaction_id) VALUES ($2, $3)",
            ],
            Family::Kv => &["KV PUT soak $1 $2 TTL 600", "KV GET soak $1"],
            Family::Sql => &[
                "INSERT INTO soak_items (k, n, note) VALUES ($1, $2, $3) \
                 ON CONFLICT (k) DO UPDATE SET n = EXCLUDED.n, note = EXCLUDED.note, updated_at = now()",
                "SELECT k, n, note FROM soak_items WHERE k = $1",
            ],
        };
        let mut stmts = Vec::new();
        for s in sql {
            stmts.push(client.prepare(s).await?);
        }
        Ok(RateConn {
            client,
            family,
            stmts,
            partitions,
        })
    }

    /// Statement number `i` of this family; returns its kind and outcome.
    async fn step(&mut self, i: u64, stats: &Stats) -> (Kind, Result<(), BoxError>) {
        let t0 = Instant::now();
        let (kind, r): (Kind, Result<(), BoxError>) = match self.family {
            Family::Push => {
                let part = format!("p{:04}", i as usize % self.partitions);
                let body = payload(i);
                let r = if i % 2 == 0 {
                    let txn = format!("soak-{i}");
                    self.client
                        .query(&self.stmts[1], &[&part, &Json(&body), &txn])
                        .await
                } else {
                    self.client
                        .query(&self.stmts[0], &[&part, &Json(&body)])
                        .await
                };
                let r = r.map_err(BoxError::from).and_then(|rows| {
                    let queued = rows
                        .iter()
                        .filter(|r| r.try_get::<_, &str>("status").ok() == Some("queued"))
                        .count();
                    if queued == 1 {
                        stats.pushed.fetch_add(1, Ordering::Relaxed);
                        Ok(())
                    } else {
                        Err(format!("PUSH: {queued} of 1 queued").into())
                    }
                });
                (Kind::Push, r)
            }
            Family::Kv => {
                let key = format!("k{}", (i / 2) % KEYS);
                if i % 2 == 0 {
                    let body = payload(i);
                    let r = self
                        .client
                        .query(&self.stmts[0], &[&key, &Json(&body)])
                        .await
                        .map(|_| ())
                        .map_err(BoxError::from);
                    (Kind::KvPut, r)
                } else {
                    let r = self
                        .client
                        .query(&self.stmts[1], &[&key])
                        .await
                        .map(|_| ())
                        .map_err(BoxError::from);
                    (Kind::KvGet, r)
                }
            }
            Family::Sql => {
                let k = ((i / 2) % KEYS) as i32;
                if i % 2 == 0 {
                    let note = format!("note {i}");
                    let r = self
                        .client
                        .execute(&self.stmts[0], &[&k, &(i as i64), &note])
                        .await
                        .map(|_| ())
                        .map_err(BoxError::from);
                    (Kind::SqlUpsert, r)
                } else {
                    let r = self
                        .client
                        .query(&self.stmts[1], &[&k])
                        .await
                        .map(|_| ())
                        .map_err(BoxError::from);
                    (Kind::SqlSelect, r)
                }
            }
        };
        if r.is_ok() {
            stats.record(kind, t0);
        }
        (kind, r)
    }
}

/// `conns` connections sharing one schedule of `rate` statements/s until
/// `end`: statement i is due at base + i / rate (open loop: a slow reply
/// delays only its own connection's next statement).
#[allow(clippy::too_many_arguments)]
fn spawn_rate(
    tasks: &mut tokio::task::JoinSet<()>,
    cfg: &Config,
    family: fn() -> Family,
    rate: u64,
    conns: usize,
    partitions: usize,
    base: Instant,
    end: Instant,
    stats: &Arc<Stats>,
) {
    if rate == 0 {
        return;
    }
    let next = Arc::new(AtomicU64::new(0));
    for _ in 0..conns {
        let (cfg, next, stats) = (cfg.clone(), next.clone(), stats.clone());
        tasks.spawn(async move {
            let mut conn = None;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let due = base + Duration::from_secs_f64(i as f64 / rate as f64);
                if due >= end {
                    return;
                }
                tokio::time::sleep_until(due.into()).await;
                if Instant::now() > due + Duration::from_secs(1) {
                    stats.late.fetch_add(1, Ordering::Relaxed);
                }
                if conn.is_none() {
                    match RateConn::new(&cfg, family(), partitions).await {
                        Ok(c) => conn = Some(c),
                        Err(e) => {
                            stats.error(Kind::Push, &e);
                            tokio::time::sleep(Duration::from_secs(1)).await;
                            continue;
                        }
                    }
                }
                let Some(c) = conn.as_mut() else { continue };
                let (kind, r) = match tokio::time::timeout(
                    crate::runner::OP_TIMEOUT,
                    c.step(i, &stats),
                )
                .await
                {
                    Ok(x) => x,
                    Err(_) => (Kind::Push, Err("a statement took more than 30 s".into())),
                };
                if let Err(e) = r {
                    stats.error(kind, &e);
                    if c.client.is_closed() {
                        conn = None;
                    }
                }
            }
        });
    }
}

/// A consumer of the group: `POP … LIMIT 20 PARTITIONS 4`, ACK of every
/// receipt; 10 ms pause after an empty POP.
async fn consume(cfg: Config, stats: Arc<Stats>, stop: Arc<AtomicBool>) {
    let mut acks: HashMap<usize, Statement> = HashMap::new();
    let mut conn: Option<(Client, Statement)> = None;
    while !stop.load(Ordering::Relaxed) {
        if conn.is_none() {
            let c = async {
                let client = setup::connect(&cfg).await?;
                let pop = client
                    .prepare(&format!(
                        "POP FROM {QUEUE} GROUP {GROUP} LIMIT 20 PARTITIONS 4"
                    ))
                    .await?;
                Ok::<_, BoxError>((client, pop))
            }
            .await;
            match c {
                Ok(c) => {
                    acks.clear();
                    conn = Some(c);
                }
                Err(e) => {
                    stats.error(Kind::Pop, &e);
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            }
        }
        let Some((client, pop)) = conn.as_ref() else {
            continue;
        };
        let r: Result<usize, (Kind, BoxError)> = async {
            let t0 = Instant::now();
            let rows = client
                .query(pop, &[])
                .await
                .map_err(|e| (Kind::Pop, e.into()))?;
            stats.record(Kind::Pop, t0);
            if rows.is_empty() {
                return Ok(0);
            }
            let receipts: Vec<String> = rows
                .iter()
                .map(|r| r.try_get::<_, String>("receipt"))
                .collect::<Result<_, _>>()
                .map_err(|e| (Kind::Pop, e.into()))?;
            let ack = match acks.get(&receipts.len()) {
                Some(s) => s.clone(),
                None => {
                    let list = (1..=receipts.len())
                        .map(|i| format!("${i}"))
                        .collect::<Vec<_>>()
                        .join(", ");
                    let s = client
                        .prepare(&format!("ACK {list}"))
                        .await
                        .map_err(|e| (Kind::Ack, e.into()))?;
                    acks.insert(receipts.len(), s.clone());
                    s
                }
            };
            let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = receipts
                .iter()
                .map(|r| r as &(dyn tokio_postgres::types::ToSql + Sync))
                .collect();
            let t1 = Instant::now();
            let acked = client
                .query(&ack, &params)
                .await
                .map_err(|e| (Kind::Ack, e.into()))?;
            stats.record(Kind::Ack, t1);
            let ok = acked
                .iter()
                .filter(|r| r.try_get::<_, &str>(1).ok() == Some("acked"))
                .count();
            stats.acked.fetch_add(ok as u64, Ordering::Relaxed);
            if ok != receipts.len() {
                return Err((
                    Kind::Ack,
                    format!("ACK: {ok} of {} acked", receipts.len()).into(),
                ));
            }
            Ok(rows.len())
        }
        .await;
        match r {
            Ok(0) => tokio::time::sleep(Duration::from_millis(10)).await,
            Ok(_) => {}
            Err((kind, e)) => {
                stats.error(kind, &e);
                if client.is_closed() {
                    conn = None;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

fn fmt_lat(l: Option<&(f64, f64, usize)>) -> String {
    l.map_or("–".into(), |(p50, p99, _)| {
        format!("{:.1}/{:.1}", p50 / 1000.0, p99 / 1000.0)
    })
}

fn print_header() {
    let kinds: Vec<&str> = KINDS.iter().map(|k| k.label()).collect();
    println!(
        "| min | RSS MB | FDs | log_segments MB | log_txns MB | queen log tables MB | segments | kv MB | retention_history MB | soak_items MB | backlog | {} p50/p99 ms | errors |",
        kinds.join(" p50/p99 ms | ")
    );
    println!("|{}", "---:|".repeat(11 + KINDS.len() + 1));
}

fn print_minute(m: &Minute) {
    let lat: Vec<String> = KINDS.iter().map(|k| fmt_lat(m.lat.get(k))).collect();
    println!(
        "| {} | {:.1} | {} | {:.2} | {:.2} | {:.2} | {} | {:.2} | {:.3} | {:.2} | {} | {} | {} |",
        m.minute,
        m.rss,
        m.fds,
        mb(m.sizes.segments),
        mb(m.sizes.txns),
        mb(m.sizes.log_total),
        m.sizes.segment_rows,
        mb(m.sizes.kv),
        mb(m.sizes.retention_history),
        mb(m.sizes.items),
        m.backlog,
        lat.join(" | "),
        m.errors
    );
}

async fn load(args: &SoakArgs, cfg: &Config, pg: &Client, pid: u32) -> Result<(), BoxError> {
    let admin = setup::connect(cfg).await?;
    admin
        .simple_query(&format!(
            "CREATE QUEUE {QUEUE} WITH (completed_retention_seconds = 60)"
        ))
        .await?;
    let stats = Arc::new(Stats::default());
    let stop = Arc::new(AtomicBool::new(false));
    let minutes = args.minutes;
    let base = Instant::now() + Duration::from_millis(500);
    let end = base + Duration::from_secs(60 * minutes);
    eprintln!(
        "soak: load for {minutes} min: PUSH {}/s over {} partitions, {} consumers, KV {}/s, passthrough {}/s",
        args.push_rate, args.partitions, args.consumers, args.kv_rate, args.sql_rate
    );
    println!(
        "### Load: {minutes} min; PUSH {}/s (1 message each, every other with a transaction id, {} partitions), {} consumers of one group (POP … LIMIT 20 PARTITIONS 4 + ACK), KV {}/s (PUT/GET, 1,000 keys), passthrough {}/s (upsert/SELECT, 1,000 rows); queue WITH (completed_retention_seconds = 60)",
        args.push_rate, args.partitions, args.consumers, args.kv_rate, args.sql_rate
    );
    println!();
    print_header();
    let mut rows = vec![Minute {
        minute: 0,
        rss: rss_mb(pid),
        fds: fds(pid),
        sizes: sizes(pg).await?,
        backlog: 0,
        lat: HashMap::new(),
        errors: 0,
    }];
    print_minute(&rows[0]);
    let mut tasks = tokio::task::JoinSet::new();
    spawn_rate(
        &mut tasks,
        cfg,
        || Family::Push,
        args.push_rate,
        PUSH_CONNS,
        args.partitions,
        base,
        end,
        &stats,
    );
    spawn_rate(
        &mut tasks,
        cfg,
        || Family::Kv,
        args.kv_rate,
        RATE_CONNS,
        args.partitions,
        base,
        end,
        &stats,
    );
    spawn_rate(
        &mut tasks,
        cfg,
        || Family::Sql,
        args.sql_rate,
        RATE_CONNS,
        args.partitions,
        base,
        end,
        &stats,
    );
    for _ in 0..args.consumers {
        tasks.spawn(consume(cfg.clone(), stats.clone(), stop.clone()));
    }
    for minute in 1..=minutes {
        tokio::time::sleep_until((base + Duration::from_secs(60 * minute)).into()).await;
        let lat = stats
            .take()
            .into_iter()
            .map(|(k, mut v)| {
                v.sort_unstable();
                let p50 = percentile(&v, 0.5).unwrap_or(0.0);
                let p99 = percentile(&v, 0.99).unwrap_or(0.0);
                (k, (p50, p99, v.len()))
            })
            .collect();
        let row = Minute {
            minute,
            rss: rss_mb(pid),
            fds: fds(pid),
            sizes: sizes(pg).await?,
            backlog: stats.pushed.load(Ordering::Relaxed) as i64
                - stats.acked.load(Ordering::Relaxed) as i64,
            lat,
            errors: stats.errors.load(Ordering::Relaxed),
        };
        print_minute(&row);
        rows.push(row);
    }
    stop.store(true, Ordering::Relaxed);
    let drained = tokio::time::timeout(Duration::from_secs(60), async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tasks.abort_all();
    }
    println!();
    summary(&rows, &stats);
    Ok(())
}

fn summary(rows: &[Minute], stats: &Stats) {
    let (Some(first), Some(last)) = (rows.get(1), rows.last()) else {
        return;
    };
    let max_by = |f: &dyn Fn(&Minute) -> f64| rows[1..].iter().map(f).fold(0f64, f64::max);
    println!(
        "Summary: {} pushed, {} acked, backlog at the end {}, {} errors, {} statements started > 1 s late.",
        stats.pushed.load(Ordering::Relaxed),
        stats.acked.load(Ordering::Relaxed),
        last.backlog,
        stats.errors.load(Ordering::Relaxed),
        stats.late.load(Ordering::Relaxed)
    );
    println!(
        "- queenwire RSS: minute 1 {:.1} MB, minute {} {:.1} MB, highest {:.1} MB; FDs: minute 1 {}, last {}, highest {}.",
        first.rss,
        last.minute,
        last.rss,
        max_by(&|m| m.rss),
        first.fds,
        last.fds,
        max_by(&|m| m.fds as f64)
    );
    println!(
        "- queen log tables: minute 1 {:.2} MB, last {:.2} MB, highest {:.2} MB; segments: minute 1 {}, last {}, highest {:.0}; kv {:.2} → {:.2} MB.",
        mb(first.sizes.log_total),
        mb(last.sizes.log_total),
        max_by(&|m| mb(m.sizes.log_total)),
        first.sizes.segment_rows,
        last.sizes.segment_rows,
        max_by(&|m| m.sizes.segment_rows as f64),
        mb(first.sizes.kv),
        mb(last.sizes.kv)
    );
    let half = rows.len() / 2;
    for k in KINDS {
        let p99s = |r: &[Minute]| -> Vec<f64> {
            r.iter()
                .filter_map(|m| m.lat.get(&k).map(|l| l.1))
                .collect()
        };
        let early = p99s(&rows[1..half.max(2)]);
        let late = p99s(&rows[half.max(1)..]);
        let avg = |v: &[f64]| {
            if v.is_empty() {
                f64::NAN
            } else {
                v.iter().sum::<f64>() / v.len() as f64 / 1000.0
            }
        };
        println!(
            "- {} p99: minute 1 {} ms, last {} ms, mean of the first half {:.2} ms vs the second half {:.2} ms.",
            k.label(),
            first.lat.get(&k).map_or("–".into(), |l| format!("{:.2}", l.1 / 1000.0)),
            last.lat.get(&k).map_or("–".into(), |l| format!("{:.2}", l.1 / 1000.0)),
            avg(&early),
            avg(&late)
        );
    }
    println!();
}

// ---- part 2: idle connections ---------------------------------------------

/// A TCP connection that has finished startup (up to ReadyForQuery).
async fn raw_startup(addr: SocketAddr) -> Result<TcpStream, BoxError> {
    let mut stream = TcpStream::connect(addr).await?;
    let mut packet = BytesMut::new();
    postgres_protocol::message::frontend::startup_message(
        [("user", "bench"), ("database", "postgres")],
        &mut packet,
    )?;
    stream.write_all(&packet).await?;
    let mut buf = BytesMut::with_capacity(512);
    loop {
        while buf.len() >= 5 {
            let tag = buf[0];
            let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
            if buf.len() < 1 + len {
                break;
            }
            if tag == b'E' {
                let text = String::from_utf8_lossy(&buf[5..1 + len]).replace('\0', " ");
                return Err(format!("startup refused: {text}").into());
            }
            if tag == b'Z' {
                return Ok(stream);
            }
            buf.advance(1 + len);
        }
        if stream.read_buf(&mut buf).await? == 0 {
            return Err("closed during startup".into());
        }
    }
}

/// Connect + `SELECT 1` of one fresh client, in ms.
async fn one_more(cfg: &Config) -> Result<f64, BoxError> {
    let t0 = Instant::now();
    let client = setup::connect(cfg).await?;
    client.simple_query("SELECT 1").await?;
    Ok(t0.elapsed().as_secs_f64() * 1000.0)
}

async fn one_more_times(cfg: &Config) -> Result<String, BoxError> {
    let mut t = Vec::new();
    for _ in 0..5 {
        t.push(one_more(cfg).await?);
    }
    Ok(t.iter()
        .map(|x| format!("{x:.2}"))
        .collect::<Vec<_>>()
        .join(", "))
}

async fn idle(n: usize, cfg: &Config, pid: u32, addr: SocketAddr) -> Result<(), BoxError> {
    println!("### Idle connections: {n} (TCP + startup, then silent)");
    println!();
    let before = (rss_mb(pid), fds(pid));
    let base_times = one_more_times(cfg).await?;
    eprintln!("soak: opening {n} idle connections");
    let t0 = Instant::now();
    let mut open = Vec::with_capacity(n);
    let mut failure = None;
    const AT_ONCE: usize = 200;
    while open.len() < n && failure.is_none() {
        let mut batch = tokio::task::JoinSet::new();
        for _ in 0..AT_ONCE.min(n - open.len()) {
            batch.spawn(tokio::time::timeout(
                Duration::from_secs(30),
                raw_startup(addr),
            ));
        }
        while let Some(r) = batch.join_next().await {
            match r {
                Ok(Ok(Ok(s))) => open.push(s),
                Ok(Ok(Err(e))) => {
                    failure.get_or_insert(setup::describe(&*e));
                }
                Ok(Err(_)) => {
                    failure.get_or_insert("a startup took more than 30 s".into());
                }
                Err(e) => {
                    failure.get_or_insert(e.to_string());
                }
            }
        }
    }
    let opened_in = t0.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let with = (rss_mb(pid), fds(pid));
    let with_times = one_more_times(cfg).await;
    let opened = open.len();
    drop(open);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = (rss_mb(pid), fds(pid));
    println!("| | queenwire RSS MB | FDs | connect + SELECT 1, 5 tries (ms) |");
    println!("|---|---:|---:|---|");
    println!("| before | {:.1} | {} | {base_times} |", before.0, before.1);
    println!(
        "| {opened} idle open | {:.1} | {} | {} |",
        with.0,
        with.1,
        with_times
            .as_ref()
            .map_or_else(|e| format!("failed: {e}"), |s| s.clone())
    );
    println!("| after closing them | {:.1} | {} | |", after.0, after.1);
    println!();
    println!(
        "Opened {opened} of {n} in {opened_in:.1} s ({AT_ONCE} at a time); {:.1} kB of queenwire RSS per idle connection.{}",
        (with.0 - before.0) * 1024.0 / opened.max(1) as f64,
        failure.map_or(String::new(), |f| format!(" Stopped opening: {f}."))
    );
    println!();
    Ok(())
}

// ---- part 3: churn --------------------------------------------------------

async fn churn(rounds: usize, clients: usize, cfg: &Config, pid: u32) -> Result<(), BoxError> {
    println!("### Churn: {rounds} rounds of {clients} clients (connect, SELECT 1, disconnect; 50 at a time)");
    println!();
    println!(
        "| round | RSS MB before | FDs before | RSS MB after | FDs after | seconds | failures |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    for round in 1..=rounds {
        let before = (rss_mb(pid), fds(pid));
        let t0 = Instant::now();
        let next = Arc::new(AtomicU64::new(0));
        let failures = Arc::new(AtomicU64::new(0));
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..50 {
            let (cfg, next, failures) = (cfg.clone(), next.clone(), failures.clone());
            tasks.spawn(async move {
                while next.fetch_add(1, Ordering::Relaxed) < clients as u64 {
                    let r = tokio::time::timeout(Duration::from_secs(30), one_more(&cfg)).await;
                    if !matches!(r, Ok(Ok(_))) && failures.fetch_add(1, Ordering::Relaxed) < 3 {
                        eprintln!("soak: churn client failed: {r:?}");
                    }
                }
            });
        }
        while tasks.join_next().await.is_some() {}
        let secs = t0.elapsed().as_secs_f64();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let after = (rss_mb(pid), fds(pid));
        println!(
            "| {round} | {:.1} | {} | {:.1} | {} | {secs:.2} | {} |",
            before.0,
            before.1,
            after.0,
            after.1,
            failures.load(Ordering::Relaxed)
        );
    }
    println!();
    Ok(())
}
