//! Background work on a connection of its own: the KV quota poll (every
//! queenwire, read-only), and, in one queenwire at a time (elected per
//! cycle through `queen.maintenance_leases`), the KV sweeper and the
//! max_wait_time_seconds expiry of pending messages to the DLQ.

use super::kv::{KvState, Quota};
use crate::shutdown::ShutdownSignal;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

/// How often usage and quotas are re-read (the quota is soft and late by
/// this much; chosen, not measured).
const QUOTA_POLL: Duration = Duration::from_secs(5);
/// How often the elected sweeper prunes expired keys.
const SWEEP_INTERVAL: Duration = Duration::from_secs(5);
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
pub async fn run(config: tokio_postgres::Config, kv: Arc<KvState>, shutdown: ShutdownSignal) {
    tokio::select! {
        () = run_forever(config, kv) => {}
        () = shutdown.begun() => {}
    }
}

async fn run_forever(config: tokio_postgres::Config, kv: Arc<KvState>) {
    let holder = Uuid::now_v7().to_string();
    let mut sweeps = 0u32;
    loop {
        let client = match config.connect(tokio_postgres::NoTls).await {
            Ok((client, connection)) => {
                tokio::spawn(async move {
                    let _ = connection.await;
                });
                client
            }
            Err(e) => {
                tracing::warn!("maintenance connection: {e}; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        loop {
            if let Err(e) = poll_quotas(&client, &kv).await {
                tracing::warn!("KV quota poll: {e}");
                tokio::time::sleep(QUOTA_POLL).await;
                break;
            }
            if let Err(e) = expire_pending(&client, &holder).await {
                tracing::warn!("expiring pending messages: {e}");
            }
            match sweep(&client, &holder, sweeps.is_multiple_of(ROLLUP_EVERY)).await {
                Ok(true) => sweeps += 1,
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!("KV sweep: {e}");
                    tokio::time::sleep(SWEEP_INTERVAL).await;
                    break;
                }
            }
            tokio::time::sleep(QUOTA_POLL.min(SWEEP_INTERVAL)).await;
        }
    }
}

async fn poll_quotas(
    client: &tokio_postgres::Client,
    kv: &KvState,
) -> Result<(), tokio_postgres::Error> {
    let rows = client
        .query(
            "SELECT tenant_id, max_keys, max_bytes, used_keys, used_bytes FROM queen.kv_quota_poll_v1()",
            &[],
        )
        .await?;
    let mut quotas = HashMap::new();
    for r in rows {
        let tenant: Uuid = r.get(0);
        quotas.insert(
            tenant,
            Quota {
                max_keys: r.get(1),
                max_bytes: r.get(2),
                used_keys: r.get::<_, Option<i64>>(3).unwrap_or(0),
                used_bytes: r.get::<_, Option<i64>>(4).unwrap_or(0),
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
) -> Result<(), tokio_postgres::Error> {
    let lease_ms = (SWEEP_INTERVAL * 3).as_millis() as i64;
    let elected: bool = client
        .query_one(
            "SELECT queen.maintenance_try_lease_v1('log_expire', $1, $2)",
            &[&holder, &lease_ms],
        )
        .await?
        .get(0);
    if !elected {
        return Ok(());
    }
    for _ in 0..EXPIRE_ROUNDS {
        let moved: i32 = client
            .query_one("SELECT queen.log_expire_pending_v1($1)", &[&EXPIRE_BATCH])
            .await?
            .get(0);
        if moved < EXPIRE_BATCH {
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
) -> Result<bool, tokio_postgres::Error> {
    let lease_ms = (SWEEP_INTERVAL * 3).as_millis() as i64;
    let elected: bool = client
        .query_one(
            "SELECT queen.maintenance_try_lease_v1('kv_sweep', $1, $2)",
            &[&holder, &lease_ms],
        )
        .await?
        .get(0);
    if !elected {
        return Ok(false);
    }
    for shard in 0..SHARDS {
        client
            .execute(
                "SELECT queen.kv_prune_shard_v1($1, $2)",
                &[&shard, &PRUNE_BATCH],
            )
            .await?;
    }
    if rollup {
        client
            .execute("SELECT queen.kv_usage_rollup_v1()", &[])
            .await?;
    }
    Ok(true)
}
