//! The load part: the steady offered mix, one line a minute, the summary.

use super::{
    fds, mb, rss_mb, Kind, SoakArgs, Stats, GROUP, KEYS, KINDS, PUSH_CONNS, QUEUE, RATE_CONNS,
};
use crate::payload::payload;
use crate::pgtypes::Json;
use crate::runner::percentile;
use crate::setup::{self, BoxError};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_postgres::{Client, Config, Statement};

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
                let r = if i.is_multiple_of(2) {
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
                if i.is_multiple_of(2) {
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
                if i.is_multiple_of(2) {
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

pub(super) async fn load(
    args: &SoakArgs,
    cfg: &Config,
    pg: &Client,
    pid: u32,
) -> Result<(), BoxError> {
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
