//! Background work on a connection of its own: the KV quota poll (every
//! queenwire, read-only), and, in one queenwire at a time (elected per
//! cycle through `queen.maintenance_leases`), the KV sweeper with its usage
//! rollup, the max_wait_time_seconds expiry of pending messages to the DLQ
//! and the metrics rollup. Retention and partition cleanup run beside them
//! on a second connection, on their own cycle ([`super::retention`]).
//!
//! Election as retention does it: every process ticks four times a cycle
//! and asks for each task's lease (one cycle long) at every tick; the
//! holder renews it so and runs the task once a cycle. A holder killed
//! with `kill -9` stops renewing: its lease runs out within a cycle and
//! another process takes the task at its next tick (within 1.25 cycles).

use super::kv::{KvState, Quota};
use super::leases::elected;
use super::retention::{self, RetentionSettings};
use crate::backend::call::{execute, query, ClientCallError};
use crate::backend::health::{connect_client, Health};
use crate::calls::maintenance::{ExpirePending, PruneShard, QuotaPoll, UsageRollup};
use crate::calls::metrics::Rollup;
use crate::shutdown::ShutdownSignal;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use uuid::Uuid;

/// How often usage and quotas are re-read (the quota is soft and late by
/// this much; chosen, not measured).
const QUOTA_POLL: Duration = Duration::from_secs(5);
/// How often the elected sweeper prunes expired keys (and the other
/// elected tasks run): one cycle, also the length of a task's lease.
const SWEEP_INTERVAL: Duration = Duration::from_secs(5);
/// Every process asks for the leases four times a cycle.
const TICK: Duration = Duration::from_millis(1250);
/// Rows deleted per shard per statement.
const PRUNE_BATCH: i32 = 1000;
/// Shards of `queen.kv` (fixed at 64 by the table's generated column).
const SHARDS: i32 = 64;
/// Messages expired per statement, and statements per cycle.
const EXPIRE_BATCH: i32 = 1000;
const EXPIRE_ROUNDS: usize = 10;
/// Usage is recomputed every this many sweeps.
const ROLLUP_EVERY: u32 = 6;

/// Runs the cycles until shutdown begins (mid-cycle too: each step is a
/// transaction of its own, and the lease of an interrupted one expires).
pub async fn run(
    config: tokio_postgres::Config,
    kv: Arc<KvState>,
    retention: RetentionSettings,
    shutdown: ShutdownSignal,
) {
    let holder = holder_identity();
    tokio::select! {
        () = run_forever(config.clone(), kv, &holder) => {}
        () = retention::run(config, retention, holder.clone()) => {}
        () = shutdown.begun() => {}
    }
}

/// This process's name in `queen.maintenance_leases` and
/// `queen.retention_history`: the pid, so an operator can tell which
/// process runs a task, and a fresh UUIDv7, so a restarted process (or a
/// second server in one process) is a new holder.
fn holder_identity() -> String {
    format!("pid {} {}", std::process::id(), Uuid::now_v7())
}

/// When this process last ran each elected task (`None`: not since it
/// last took the task over).
#[derive(Default)]
struct Schedule {
    quotas: Option<Instant>,
    expire: Option<Instant>,
    metrics: Option<Instant>,
    sweep: Option<Instant>,
}

/// Whether this process holds `task`'s lease (renewing it) and the task is
/// due; notes the run.
async fn due(
    client: &tokio_postgres::Client,
    task: &'static str,
    holder: &str,
    last: &mut Option<Instant>,
) -> Result<bool, ClientCallError> {
    if !elected(client, task, holder, SWEEP_INTERVAL).await? {
        *last = None;
        return Ok(false);
    }
    if last.is_some_and(|t| t.elapsed() < SWEEP_INTERVAL) {
        return Ok(false);
    }
    *last = Some(Instant::now());
    Ok(true)
}

async fn run_forever(config: tokio_postgres::Config, kv: Arc<KvState>, holder: &str) {
    let mut sweeps = 0u32;
    let mut health = Health::new("maintenance");
    let mut at = Schedule::default();
    loop {
        let client = connect_client(&config, &mut health).await;
        loop {
            if at.quotas.is_none_or(|t| t.elapsed() >= QUOTA_POLL) {
                if let Err(e) = poll_quotas(&client, &kv).await {
                    report(&mut health, &client, "KV quota poll", &e);
                    tokio::time::sleep(TICK).await;
                    break;
                }
                at.quotas = Some(Instant::now());
            }
            health.ok();
            if let Err(e) = expire_pending(&client, holder, &mut at.expire).await {
                report(&mut health, &client, "expiring pending messages", &e);
            }
            if let Err(e) = metrics_rollup(&client, holder, &mut at.metrics).await {
                report(&mut health, &client, "metrics rollup", &e);
            }
            let rollup = sweeps.is_multiple_of(ROLLUP_EVERY);
            match sweep(&client, holder, rollup, &mut at.sweep).await {
                Ok(true) => sweeps += 1,
                Ok(false) => {}
                Err(e) => {
                    report(&mut health, &client, "KV sweep", &e);
                    tokio::time::sleep(TICK).await;
                    break;
                }
            }
            tokio::time::sleep(TICK).await;
        }
    }
}

/// A step failed: a lost connection is the outage's business, anything
/// else is worth a WARN of its own.
fn report(health: &mut Health, client: &tokio_postgres::Client, step: &str, e: &ClientCallError) {
    if client.is_closed() {
        health.lost(e);
    } else {
        tracing::warn!("{step}: {e}");
    }
}

async fn poll_quotas(client: &tokio_postgres::Client, kv: &KvState) -> Result<(), ClientCallError> {
    let mut quotas = HashMap::new();
    for r in query(client, &QuotaPoll).await? {
        quotas.insert(
            r.tenant_id,
            Quota {
                max_keys: r.max_keys,
                max_bytes: r.max_bytes,
                used_keys: r.used_keys.unwrap_or(0),
                used_bytes: r.used_bytes.unwrap_or(0),
            },
        );
    }
    kv.set_quotas(quotas);
    Ok(())
}

/// Messages pending past their queue's max_wait_time_seconds go to the
/// DLQ, in bounded steps, by the elected queenwire.
async fn expire_pending(
    client: &tokio_postgres::Client,
    holder: &str,
    last: &mut Option<Instant>,
) -> Result<(), ClientCallError> {
    if !due(client, "log_expire", holder, last).await? {
        return Ok(());
    }
    crate::metrics::count_maintenance_run("log_expire");
    for _ in 0..EXPIRE_ROUNDS {
        let rows = query(
            client,
            &ExpirePending {
                limit: EXPIRE_BATCH,
            },
        )
        .await?;
        let moved = rows.first().map_or(0, |r| r.moved);
        if moved < EXPIRE_BATCH {
            break;
        }
    }
    Ok(())
}

/// Metrics rows are kept this many days.
const METRICS_KEEP_DAYS: i32 = 7;
/// Partition-counter deltas folded per call, and calls per cycle.
const METRICS_ROLLUP_BATCH: i32 = 10_000;
const METRICS_ROLLUP_ROUNDS: usize = 10;

/// Folds the partition counters' deltas and prunes old metrics rows
/// (019_worker_metrics), by the elected queenwire.
async fn metrics_rollup(
    client: &tokio_postgres::Client,
    holder: &str,
    last: &mut Option<Instant>,
) -> Result<(), ClientCallError> {
    if !due(client, "metrics_rollup", holder, last).await? {
        return Ok(());
    }
    crate::metrics::count_maintenance_run("metrics_rollup");
    for _ in 0..METRICS_ROLLUP_ROUNDS {
        let rows = query(
            client,
            &Rollup {
                keep_days: METRICS_KEEP_DAYS,
                batch: METRICS_ROLLUP_BATCH,
            },
        )
        .await?;
        if rows.first().and_then(|r| r.folded).unwrap_or(0) < METRICS_ROLLUP_BATCH {
            break;
        }
    }
    Ok(())
}

/// Sweeps if this process holds the lease; returns whether it did.
async fn sweep(
    client: &tokio_postgres::Client,
    holder: &str,
    rollup: bool,
    last: &mut Option<Instant>,
) -> Result<bool, ClientCallError> {
    if !due(client, "kv_sweep", holder, last).await? {
        return Ok(false);
    }
    crate::metrics::count_maintenance_run("kv_sweep");
    for shard in 0..SHARDS {
        execute(
            client,
            &PruneShard {
                shard,
                limit: PRUNE_BATCH,
            },
        )
        .await?;
    }
    if rollup {
        crate::metrics::count_maintenance_run("usage_rollup");
        execute(client, &UsageRollup).await?;
    }
    Ok(true)
}
