//! Timers: SCHEDULE / CANCEL SCHEDULE / SHOW SCHEDULES, and the fire loop
//! every queenwire runs. A fire claims due timers with SKIP LOCKED, pushes
//! their payloads through the same `log_push_v1` path as PUSH and deletes
//! the timer rows, all in one transaction: exactly once, however many
//! proxies share the database. Timer rows are locked before any queue or
//! partition lock, as the global lock order requires.

use super::queues::{write_pushes, PreparedPush, DEFAULT_PARTITION};
use super::sealing::Sealing;
use super::values::{Cell, Params};
use super::wake::{queue_key, Announcer};
use super::ExecError;
use crate::backend::call::{CallEnd, Calls};
use crate::backend::health::Health;
use crate::backend::{pool, Pool};
use crate::calls::timers::{ClaimDue, DeleteFired, List, Postpone, TimerKeys};
use crate::calls::transaction::{
    Raise, BEGIN, COMMIT, RELEASE_FIRE, ROLLBACK, ROLLBACK_TO_FIRE, SAVEPOINT_FIRE,
};
use crate::rewrite::build;
use crate::rewrite::dialect::timer::{CancelSchedule, Schedule};
use crate::shutdown::ShutdownSignal;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

/// How long a timer whose push failed waits before it is tried again.
pub const RETRY_FAILED_FIRE: Duration = Duration::from_secs(10);

pub async fn schedule(
    conn: &mut Calls<'_>,
    stmt: &Schedule,
    params: &Params<'_>,
    max_payload: usize,
    tenant: Uuid,
) -> Result<Vec<Vec<Cell>>, ExecError> {
    let call = build::timers::schedule(stmt, params, max_payload, tenant)?;
    let rows = conn.run(&call).await?;
    let fire_at = rows.first().and_then(|r| r.fire_at);
    Ok(vec![vec![
        Cell::Text(call.queue),
        Cell::Text(call.key),
        Cell::timestamp(fire_at),
    ]])
}

pub async fn cancel(
    conn: &mut Calls<'_>,
    stmt: &CancelSchedule,
    params: &Params<'_>,
    tenant: Uuid,
) -> Result<Vec<Vec<Cell>>, ExecError> {
    let call = build::timers::cancel(stmt, params, tenant)?;
    let rows = conn.run(&call).await?;
    let cancelled = rows.first().and_then(|r| r.cancelled);
    Ok(vec![vec![
        Cell::Text(call.queue),
        Cell::Text(call.key),
        Cell::Bool(cancelled.unwrap_or(false)),
    ]])
}

pub async fn list(
    conn: &mut Calls<'_>,
    queue: Option<&str>,
    tenant: Uuid,
) -> Result<Vec<Vec<Cell>>, ExecError> {
    let rows = conn.run(&List { queue, tenant }).await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            vec![
                Cell::opt_text(r.queue),
                Cell::opt_text(r.key),
                Cell::opt_text(r.partition),
                Cell::timestamp(r.fire_at),
                Cell::opt_text(r.recurrence),
                Cell::Bool(r.catch_up.unwrap_or(false)),
            ]
        })
        .collect())
}

/// How often each queenwire looks for due timers: a timer fires within
/// about this long after its time, never before.
pub const FIRE_INTERVAL: Duration = Duration::from_millis(200);
/// Timers fired per transaction.
const FIRE_BATCH: i32 = 500;

/// Fires due timers until shutdown begins.
pub async fn fire_loop(
    pool: Pool,
    announcer: Announcer,
    sealing: Arc<Sealing>,
    shutdown: ShutdownSignal,
) {
    tokio::select! {
        () = fire_forever(pool, announcer, &sealing) => {}
        () = shutdown.begun() => {}
    }
}

async fn fire_forever(pool: Pool, announcer: Announcer, sealing: &Sealing) {
    let mut health = Health::new("timers");
    loop {
        match fire_due(&pool, &announcer, sealing).await {
            // A full batch: more may be due at once.
            Ok(n) if n >= FIRE_BATCH as usize => {
                health.ok();
                continue;
            }
            Ok(_) => health.ok(),
            Err(ExecError::Lost(e)) => health.lost(&e),
            Err(e) => tracing::warn!("firing timers: {e}"),
        }
        tokio::time::sleep(FIRE_INTERVAL).await;
    }
}

/// One transaction: claim, push, delete. Returns how many fired. When that
/// fails (one queue of the batch refuses its push: full, say), the batch is
/// claimed again and fired queue by queue behind savepoints; the timers of
/// a refusing queue are postponed by [`RETRY_FAILED_FIRE`] instead of
/// coming back first in every claim, where they would hold back everyone
/// else's due timers.
async fn fire_due(
    pool: &Pool,
    announcer: &Announcer,
    sealing: &Sealing,
) -> Result<usize, ExecError> {
    match fire_batch(pool, announcer, sealing, false).await {
        Err(ExecError::Failed(e)) => {
            tracing::debug!("firing timers: {}; again queue by queue", e.message);
            fire_batch(pool, announcer, sealing, true).await
        }
        Err(ExecError::Refused(e)) => {
            tracing::debug!("firing timers: {}; again queue by queue", e.message);
            fire_batch(pool, announcer, sealing, true).await
        }
        other => other,
    }
}

async fn fire_batch(
    pool: &Pool,
    announcer: &Announcer,
    sealing: &Sealing,
    careful: bool,
) -> Result<usize, ExecError> {
    let mut conn = pool::checkout(pool).await.map_err(ExecError::Lost)?;
    let result = fire_on(&mut Calls::new(&mut conn, CallEnd::Flush), sealing, careful).await;
    if let Err(e) = &result {
        if !matches!(e, ExecError::Failed(_)) {
            // The backend saw no error (the engine refused something): make
            // the transaction fail, so that Sync rolls it back rather than
            // committing a claim whose timers were not all fired.
            let abandoned = Raise {
                code: "XX000",
                message: "timer fire abandoned",
            };
            let _ = conn.run(&abandoned, CallEnd::Flush).await;
        }
    }
    let mut status = conn.sync().await;
    if result.is_err() && matches!(status, Ok(s) if s.in_transaction()) {
        status = conn
            .simple_query_quiet(ROLLBACK)
            .await
            .map(|()| conn.status());
    }
    let outcome = match (result, status) {
        (Ok(fired), Ok(crate::protocol::TxStatus::Idle)) => {
            for key in &fired.1 {
                announcer.pushed(key);
            }
            Ok(fired.0)
        }
        (Ok(_), Ok(_)) => Err(ExecError::Lost(crate::backend::BackendError::Protocol(
            "timer transaction did not commit".into(),
        ))),
        (Err(e), _) => Err(e),
        (_, Err(e)) => Err(ExecError::from(e)),
    };
    pool::release(conn);
    outcome
}

/// Whether a push failed in PostgreSQL or in the engine's checks (the
/// connection itself is fine), as opposed to a lost connection.
fn push_refused(e: &ExecError) -> bool {
    matches!(e, ExecError::Refused(_) | ExecError::Failed(_))
}

async fn fire_on(
    conn: &mut Calls<'_>,
    sealing: &Sealing,
    careful: bool,
) -> Result<(usize, Vec<String>), ExecError> {
    // Claim, push and delete are one transaction: the claimed rows stay
    // locked until the commit, which is what makes a fire exactly once.
    // The careful fire needs savepoints, so an explicit block; the usual
    // one is the implicit transaction its Sync ends (two round trips fewer
    // on every poll).
    if careful {
        conn.call(&BEGIN, &[]).await?;
    }
    let rows = conn.run(&ClaimDue { limit: FIRE_BATCH }).await?;
    if rows.is_empty() {
        if careful {
            conn.call(&COMMIT, &[]).await?;
        }
        return Ok((0, Vec::new()));
    }
    type Timers = Vec<(String, String, String)>; // (key, partition, payload)
    let mut by_queue: BTreeMap<(Uuid, String), Timers> = BTreeMap::new();
    for r in rows {
        by_queue.entry((r.tenant_id, r.queue)).or_default().push((
            r.key,
            r.partition.unwrap_or_else(|| DEFAULT_PARTITION.to_string()),
            r.payload,
        ));
    }
    let mut woken = Vec::new();
    let mut fired = TimerKeys::default();
    let mut failed = TimerKeys::default();
    for ((tenant, queue), timers) in by_queue {
        let messages = timers
            .iter()
            .map(|(_, partition, payload)| (partition.clone(), payload.clone()))
            .collect();
        let mut prep = PreparedPush::from_messages(queue.clone(), messages);
        let pushed = if careful {
            conn.call(&SAVEPOINT_FIRE, &[]).await?;
            match write_pushes(conn, &mut [&mut prep], tenant, sealing).await {
                Ok(()) => {
                    conn.call(&RELEASE_FIRE, &[]).await?;
                    true
                }
                Err(e) if push_refused(&e) => {
                    tracing::warn!(
                        "timers of queue {queue} not fired, retried in {RETRY_FAILED_FIRE:?}: {e:?}"
                    );
                    // The error made the backend skip to Sync.
                    conn.sync().await?;
                    conn.call(&ROLLBACK_TO_FIRE, &[]).await?;
                    false
                }
                Err(e) => return Err(e),
            }
        } else {
            write_pushes(conn, &mut [&mut prep], tenant, sealing).await?;
            true
        };
        let target = if pushed {
            woken.push(queue_key(tenant, &queue));
            &mut fired
        } else {
            &mut failed
        };
        for (key, _, _) in timers {
            target.push(tenant, &queue, key);
        }
    }
    if !fired.is_empty() {
        conn.run(&DeleteFired { timers: &fired }).await?;
    }
    if !failed.is_empty() {
        let delay_ms = RETRY_FAILED_FIRE.as_millis() as i64;
        conn.run(&Postpone {
            timers: &failed,
            delay_ms,
        })
        .await?;
    }
    if careful {
        conn.call(&COMMIT, &[]).await?;
    }
    Ok((fired.len(), woken))
}
