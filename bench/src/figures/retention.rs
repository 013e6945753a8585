//! PUSH and POP latency on a partition while a retention pass deletes a
//! large backlog from the front of that same partition, against the same
//! workload without a pass (docs/internals/storage.md quotes the figures).
//! The spread of the two runs without a pass, before and after, is the
//! noise of the machine, against which the ratio must be read.

use super::{check, col, rows, Proxy, Site};
use crate::setup::{self, BoxError};
use queenwire::engine::retention::{trim_partition, Pace, RetentionSettings, STEP_SEGMENTS};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_postgres::Client;

/// PUSHes per second: about half of what one client pushes flat out on
/// the 2-core machine (about 700/s), which one POP/ACK client keeps up with.
const PUSH_RATE: u32 = 300;

/// The sizes of one run.
#[derive(Clone, Copy)]
struct Scale {
    /// Old, fully acknowledged segments waiting for retention.
    backlog: i64,
    /// Length of a run without a pass.
    baseline: Duration,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((sorted.len() as f64) * p).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn summary(label: &str, mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    let p50 = percentile(&samples, 0.50);
    let p99 = percentile(&samples, 0.99);
    println!(
        "{label:<22} n={:<6} p50={:>8.2?} p99={:>8.2?} max={:>8.2?}",
        samples.len(),
        p50,
        p99,
        samples.last().copied().unwrap_or_default()
    );
    (p50, p99)
}

/// A backlog of one-message segments, an hour old, before the real
/// messages of partition Default of queue `lat`, with the queue-mode
/// group's cursor past them: all of it due under the completed rule. The
/// blobs are never decoded (no cursor points into them).
async fn preload(direct: &Client, backlog: i64) -> Result<(), BoxError> {
    direct
        .batch_execute(&format!(
            "WITH p AS (SELECT p.id FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
                        WHERE q.name = 'lat' AND p.name = 'Default')
             INSERT INTO queen.log_segments (partition_id, base_offset, min_created_at, max_created_at,
                                             message_count, byte_size, blob)
             SELECT p.id, p0.last_offset + g, now() - interval '1 hour', now() - interval '1 hour', 1, 200,
                    decode(repeat('01', 200), 'hex')
             FROM p, queen.log_partitions p0, generate_series(1, {backlog}) g WHERE p0.id = p.id;
             WITH p AS (SELECT p.id, p.last_offset FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
                        WHERE q.name = 'lat' AND p.name = 'Default')
             INSERT INTO queen.log_txns (partition_id, base_offset, created_at, txn_hashes, message_ids)
             SELECT p.id, p.last_offset + g, now() - interval '1 hour', NULL, ARRAY[gen_random_uuid()]
             FROM p, generate_series(1, {backlog}) g;
             UPDATE queen.log_segments s SET min_created_at = now() - interval '1 hour',
                                             max_created_at = now() - interval '1 hour'
             FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
             WHERE s.partition_id = p.id AND q.name = 'lat' AND s.base_offset = 0;
             UPDATE queen.log_partitions p SET last_offset = p.last_offset + {backlog}
             FROM queen.queues q WHERE q.id = p.queue_id AND q.name = 'lat';
             UPDATE queen.log_consumers c SET cursor_offset = p.last_offset
             FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
             WHERE c.partition_id = p.id AND q.name = 'lat';"
        ))
        .await?;
    direct
        .batch_execute("VACUUM ANALYZE queen.log_segments, queen.log_txns, queen.log_partitions")
        .await?;
    Ok(())
}

type Samples = (Vec<Duration>, Vec<Duration>);

/// The workload for `length`, with no retention pass running.
async fn baseline(proxy: &Proxy, length: Duration) -> Result<Samples, BoxError> {
    let stop = Arc::new(AtomicBool::new(false));
    let timer = {
        let stop = stop.clone();
        tokio::spawn(async move {
            tokio::time::sleep(length).await;
            stop.store(true, Ordering::Relaxed);
        })
    };
    let samples = workload(proxy, stop).await?;
    timer.await?;
    Ok(samples)
}

/// PUSH and POP+ACK in two loops until `stop`; their latencies.
async fn workload(proxy: &Proxy, stop: Arc<AtomicBool>) -> Result<Samples, BoxError> {
    let pusher = {
        let cfg = proxy.client_config();
        let stop = stop.clone();
        tokio::spawn(async move {
            let client = setup::connect(&cfg).await?;
            let mut took = Vec::new();
            let mut n = 0u64;
            // A fixed rate, not as fast as it can: the consumer keeps up
            // with it, so every phase sees the same work (one message per
            // POP or so). Flat out, the pusher outran the consumer and the
            // phases after the pass popped ten-segment batches from a
            // backlog, which is slower whatever retention does.
            let mut tick = tokio::time::interval(Duration::from_secs(1) / PUSH_RATE);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                let t = Instant::now();
                rows(&client, &format!("PUSH INTO lat VALUES ('{{\"n\":{n}}}')")).await?;
                took.push(t.elapsed());
                n += 1;
            }
            Ok::<_, BoxError>(took)
        })
    };
    let popper = {
        let cfg = proxy.client_config();
        tokio::spawn(async move {
            let client = setup::connect(&cfg).await?;
            let mut took = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                let got = rows(&client, "POP FROM lat LIMIT 10").await?;
                took.push(t.elapsed());
                if got.is_empty() {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                for r in got {
                    rows(&client, &format!("ACK '{}'", col(&r, "receipt"))).await?;
                }
            }
            Ok::<_, BoxError>(took)
        })
    };
    Ok((pusher.await??, popper.await??))
}

/// The engine's pass (src/engine/retention.rs): pages of the work list,
/// and on each partition the engine's own `trim_partition`, until the
/// backlog is gone. Returns the pass's length, its longest step (the
/// longest one retention transaction took) and the segments deleted.
async fn retention_pass(direct: &Client) -> Result<(Duration, Duration, i64), BoxError> {
    let started = Instant::now();
    let mut longest = Duration::ZERO;
    let mut deleted = 0i64;
    let mut locked = 0usize;
    loop {
        let page = direct
            .query(
                "SELECT partition_id FROM queen.log_retention_work_v1(0, 64)",
                &[],
            )
            .await?;
        if page.is_empty() {
            break;
        }
        for row in &page {
            let until = Instant::now() + Duration::from_secs(3600);
            let trimmed =
                trim_partition(direct, row.get(0), usize::MAX, until, Pace::GENTLE).await?;
            longest = longest.max(trimmed.longest_step);
            deleted += trimmed.segments;
            locked += trimmed.locked_retries;
        }
    }
    println!("retention pass: {locked} steps found the partition held by a push and were retried");
    Ok((started.elapsed(), longest, deleted))
}

pub async fn during_a_pass_against_without(site: &Site, quick: bool) -> Result<(), BoxError> {
    let scale = if quick {
        Scale {
            backlog: 10_000,
            baseline: Duration::from_secs(3),
        }
    } else {
        Scale {
            backlog: 100_000,
            baseline: Duration::from_secs(10),
        }
    };
    let proxy = Proxy::start_with(site, "retention_latency", |c| {
        c.pool_size = 4;
        c.retention = RetentionSettings {
            interval: Duration::from_secs(3600),
            cleanup_age: Duration::from_secs(3600),
        };
    })
    .await?;
    let client = proxy.connect().await?;
    client
        .batch_execute("CREATE QUEUE lat WITH (completed_retention_seconds = 3600)")
        .await?;
    rows(&client, "PUSH INTO lat VALUES ('0')").await?;
    for r in rows(&client, "POP FROM lat").await? {
        rows(&client, &format!("ACK '{}'", col(&r, "receipt"))).await?;
    }
    let direct = proxy.connect_direct().await?;
    preload(&direct, scale.backlog).await?;

    // A warm-up, unmeasured: the hot partition's row versions and the
    // consumer row settle into the steady state the later phases see
    // (measured: the first seconds of a fresh database are the fastest).
    baseline(&proxy, scale.baseline).await?;
    // Without a pass (the backlog is not due yet: an hour's retention).
    let (push_base, pop_base) = baseline(&proxy, scale.baseline).await?;

    // During a pass: the backlog becomes due, and the pass runs beside the
    // same workload until it has deleted all of it.
    direct
        .batch_execute(
            // Ten minutes: the backlog (an hour old) is due, what the
            // workload pushes during the pass is not.
            "UPDATE queen.queues SET completed_retention_seconds = 600 WHERE name = 'lat'",
        )
        .await?;
    let stop = Arc::new(AtomicBool::new(false));
    let pass = {
        let stop = stop.clone();
        let cfg = proxy.direct.clone();
        tokio::spawn(async move {
            let own = setup::connect(&cfg).await?;
            tokio::time::sleep(Duration::from_millis(200)).await;
            let outcome = retention_pass(&own).await;
            stop.store(true, Ordering::Relaxed);
            outcome
        })
    };
    let (push_during, pop_during) = workload(&proxy, stop).await?;
    let (pass_took, longest_step, deleted) = pass.await??;

    // And without again, after it.
    let (push_after, pop_after) = baseline(&proxy, scale.baseline).await?;
    // And once VACUUM has removed the dead rows the pass left.
    let vacuum_started = Instant::now();
    direct
        .batch_execute("VACUUM queen.log_segments, queen.log_txns")
        .await?;
    let vacuum_took = vacuum_started.elapsed();
    if let Ok(secs) = std::env::var("QW_HOLD").map(|s| s.parse::<u64>().unwrap_or(300)) {
        // Keeps the cluster up after VACUUM, to look at it with psql.
        println!("holding {secs} s: direct {:?}", proxy.direct);
        tokio::time::sleep(Duration::from_secs(secs)).await;
    }
    let (push_vacuumed, pop_vacuumed) = baseline(&proxy, scale.baseline).await?;

    println!(
        "retention pass: {deleted} segments in {pass_took:.2?} ({} per step), longest step {longest_step:.2?}",
        STEP_SEGMENTS
    );
    let (_, push_p99_base) = summary("PUSH before the pass", push_base);
    let (_, push_p99_during) = summary("PUSH during the pass", push_during);
    let (_, push_p99_after) = summary("PUSH after the pass", push_after);
    summary("PUSH after VACUUM", push_vacuumed);
    let (_, pop_p99_base) = summary("POP before the pass", pop_base);
    let (_, pop_p99_during) = summary("POP during the pass", pop_during);
    let (_, pop_p99_after) = summary("POP after the pass", pop_after);
    summary("POP after VACUUM", pop_vacuumed);
    println!("VACUUM of the log tables after the pass: {vacuum_took:.2?}");
    let ratio = |during: Duration, before: Duration, after: Duration| {
        during.as_secs_f64() / ((before.as_secs_f64() + after.as_secs_f64()) / 2.0)
    };
    println!(
        "p99 during / mean of before and after: PUSH {:.2}, POP {:.2}",
        ratio(push_p99_during, push_p99_base, push_p99_after),
        ratio(pop_p99_during, pop_p99_base, pop_p99_after)
    );
    check(deleted == scale.backlog + 1, || {
        format!(
            "the pass deleted {deleted} segments, not the whole backlog ({})",
            scale.backlog + 1
        )
    })
}
