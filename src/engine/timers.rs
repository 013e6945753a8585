//! Timers: SCHEDULE / CANCEL SCHEDULE / SHOW SCHEDULES, and the fire loop
//! every queenwire runs. A fire claims due timers with SKIP LOCKED, pushes
//! their payloads through the same `log_push_v1` path as PUSH and deletes
//! the timer rows, all in one transaction: exactly once, however many
//! proxies share the database. Timer rows are locked before any queue or
//! partition lock, as the global lock order requires.

use super::queues::{write_pushes, PreparedPush, DEFAULT_PARTITION};
use super::values::{row_cells, Cell, Params};
use super::wake::{queue_key, Announcer};
use super::ExecError;
use crate::backend::conn::Internal;
use crate::backend::{pool, BackendConn, Pool};
use crate::rewrite::dialect::timer::{CancelSchedule, FireAt, Schedule};
use crate::shutdown::ShutdownSignal;
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};
use tokio_postgres::types::Type;
use uuid::Uuid;

const SCHEDULE_CALL: Internal = Internal {
    name: "qw_timer_schedule_v1",
    sql: "SELECT queen.timer_schedule_v1($1, $2, $3, $4, COALESCE($5::timestamptz, clock_timestamp() + $6 * interval '1 millisecond'), $7)",
    param_types: &[Type::TEXT, Type::TEXT, Type::TEXT, Type::TEXT, Type::TEXT, Type::INT8, Type::UUID],
};

const CANCEL_CALL: Internal = Internal {
    name: "qw_timer_cancel_v1",
    sql: "SELECT queen.timer_cancel_v1($1, $2, $3)",
    param_types: &[Type::TEXT, Type::TEXT, Type::UUID],
};

const LIST_CALL: Internal = Internal {
    name: "qw_timer_list_v1",
    sql: "SELECT queue, key, partition, fire_at FROM queen.timer_list_v1($1, $2)",
    param_types: &[Type::TEXT, Type::UUID],
};

const CLAIM_CALL: Internal = Internal {
    name: "qw_timer_claim_due_v1",
    sql: "SELECT tenant_id, queue, key, partition, payload FROM queen.timer_claim_due_v1($1)",
    param_types: &[Type::INT4],
};

const POSTPONE_CALL: Internal = Internal {
    name: "qw_timer_postpone_v1",
    sql: "SELECT queen.timer_postpone_v1($1, $2, $3, $4)",
    param_types: &[
        Type::UUID_ARRAY,
        Type::TEXT_ARRAY,
        Type::TEXT_ARRAY,
        Type::INT8,
    ],
};

const BEGIN_CALL: Internal = Internal {
    name: "qw_begin",
    sql: "BEGIN",
    param_types: &[],
};

const COMMIT_CALL: Internal = Internal {
    name: "qw_commit",
    sql: "COMMIT",
    param_types: &[],
};

const SAVEPOINT_CALL: Internal = Internal {
    name: "qw_savepoint_fire",
    sql: "SAVEPOINT qw_fire",
    param_types: &[],
};

const ROLLBACK_TO_CALL: Internal = Internal {
    name: "qw_rollback_to_fire",
    sql: "ROLLBACK TO SAVEPOINT qw_fire",
    param_types: &[],
};

const RELEASE_CALL: Internal = Internal {
    name: "qw_release_fire",
    sql: "RELEASE SAVEPOINT qw_fire",
    param_types: &[],
};

/// How long a timer whose push failed waits before it is tried again.
pub const RETRY_FAILED_FIRE: Duration = Duration::from_secs(10);

const DELETE_FIRED_CALL: Internal = Internal {
    name: "qw_timer_delete_fired_v1",
    sql: "SELECT queen.timer_delete_fired_v1($1, $2, $3)",
    param_types: &[Type::UUID_ARRAY, Type::TEXT_ARRAY, Type::TEXT_ARRAY],
};

pub async fn schedule(
    conn: &mut BackendConn,
    stmt: &Schedule,
    params: &Params<'_>,
    max_payload: usize,
    tenant: Uuid,
) -> Result<Vec<Vec<Cell>>, ExecError> {
    let queue = params.name(&stmt.queue, "queue")?;
    let key = params.name(&stmt.key, "timer key")?;
    let partition = match &stmt.partition {
        Some(p) => params.name(p, "partition")?,
        None => DEFAULT_PARTITION.to_string(),
    };
    let payload = params.json(&stmt.payload, "payload", max_payload)?;
    let (at, after_ms): (Option<String>, Option<i64>) = match &stmt.fire {
        FireAt::At(ts) => (Some(params.text(ts, "AT")?), None),
        FireAt::After(d) => {
            let d = params.duration(d, "AFTER")?;
            (None, Some(d.as_millis().min(i64::MAX as u128) as i64))
        }
    };
    let rows = conn
        .call(
            &SCHEDULE_CALL,
            &[&queue, &key, &partition, &payload, &at, &after_ms, &tenant],
        )
        .await?;
    let fire_at: Option<SystemTime> = match rows.first() {
        Some(r) => r.get(0, &Type::TIMESTAMPTZ)?,
        None => None,
    };
    Ok(vec![vec![
        Cell::Text(queue),
        Cell::Text(key),
        Cell::timestamp(fire_at),
    ]])
}

pub async fn cancel(
    conn: &mut BackendConn,
    stmt: &CancelSchedule,
    params: &Params<'_>,
    tenant: Uuid,
) -> Result<Vec<Vec<Cell>>, ExecError> {
    let queue = params.name(&stmt.queue, "queue")?;
    let key = params.name(&stmt.key, "timer key")?;
    let rows = conn.call(&CANCEL_CALL, &[&queue, &key, &tenant]).await?;
    let applied: Option<bool> = match rows.first() {
        Some(r) => r.get(0, &Type::BOOL)?,
        None => None,
    };
    Ok(vec![vec![
        Cell::Text(queue),
        Cell::Text(key),
        Cell::Bool(applied.unwrap_or(false)),
    ]])
}

pub async fn list(
    conn: &mut BackendConn,
    queue: Option<&str>,
    tenant: Uuid,
) -> Result<Vec<Vec<Cell>>, ExecError> {
    let rows = conn.call(&LIST_CALL, &[&queue, &tenant]).await?;
    rows.iter()
        .map(|r| {
            row_cells(r, crate::rewrite::dialect::timer::SHOW_COLUMNS).map_err(ExecError::from)
        })
        .collect()
}

/// How often each queenwire looks for due timers: a timer fires within
/// about this long after its time, never before.
pub const FIRE_INTERVAL: Duration = Duration::from_millis(200);
/// Timers fired per transaction.
const FIRE_BATCH: i32 = 500;

/// Fires due timers until shutdown begins.
pub async fn fire_loop(pool: Pool, announcer: Announcer, shutdown: ShutdownSignal) {
    tokio::select! {
        () = fire_forever(pool, announcer) => {}
        () = shutdown.begun() => {}
    }
}

async fn fire_forever(pool: Pool, announcer: Announcer) {
    loop {
        match fire_due(&pool, &announcer).await {
            // A full batch: more may be due at once.
            Ok(n) if n >= FIRE_BATCH as usize => continue,
            Ok(_) => {}
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
async fn fire_due(pool: &Pool, announcer: &Announcer) -> Result<usize, ExecError> {
    match fire_batch(pool, announcer, false).await {
        Err(ExecError::Failed(e)) => {
            tracing::debug!("firing timers: {}; again queue by queue", e.message);
            fire_batch(pool, announcer, true).await
        }
        Err(ExecError::Refused(e)) => {
            tracing::debug!("firing timers: {}; again queue by queue", e.message);
            fire_batch(pool, announcer, true).await
        }
        other => other,
    }
}

async fn fire_batch(pool: &Pool, announcer: &Announcer, careful: bool) -> Result<usize, ExecError> {
    let mut conn = pool
        .get()
        .await
        .map_err(|e| ExecError::Lost(crate::backend::BackendError::Protocol(e.to_string())))?;
    let result = fire_on(&mut conn, careful).await;
    if let Err(e) = &result {
        if !matches!(e, ExecError::Failed(_)) {
            // The backend saw no error (the engine refused something): make
            // the transaction fail, so that Sync rolls it back rather than
            // committing a claim whose timers were not all fired.
            let _ = conn
                .call(&super::RAISE_CALL, &[&"XX000", &"timer fire abandoned"])
                .await;
        }
    }
    let mut status = conn.sync().await;
    if result.is_err() && matches!(status, Ok(s) if s.in_transaction()) {
        status = conn
            .simple_query_quiet("ROLLBACK")
            .await
            .map(|()| conn.status);
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
        (_, Err(e)) => Err(ExecError::Lost(e)),
    };
    pool::release(conn);
    outcome
}

/// Whether a push failed in PostgreSQL or in the engine's checks (the
/// connection itself is fine), as opposed to a lost connection.
fn push_refused(e: &ExecError) -> bool {
    matches!(e, ExecError::Refused(_) | ExecError::Failed(_))
}

async fn fire_on(conn: &mut BackendConn, careful: bool) -> Result<(usize, Vec<String>), ExecError> {
    // Claim, push and delete are one transaction: the claimed rows stay
    // locked until the commit, which is what makes a fire exactly once.
    // The careful fire needs savepoints, so an explicit block; the usual
    // one is the implicit transaction its Sync ends (two round trips fewer
    // on every poll).
    conn.autosync = false;
    if careful {
        conn.call(&BEGIN_CALL, &[]).await?;
    }
    let rows = conn.call(&CLAIM_CALL, &[&FIRE_BATCH]).await?;
    if rows.is_empty() {
        if careful {
            conn.call(&COMMIT_CALL, &[]).await?;
        }
        return Ok((0, Vec::new()));
    }
    type Timers = Vec<(String, String, String)>; // (key, partition, payload)
    let mut by_queue: BTreeMap<(Uuid, String), Timers> = BTreeMap::new();
    for r in &rows {
        let tenant: Uuid = r.get(0, &Type::UUID)?;
        let queue: String = r.get(1, &Type::TEXT)?;
        let key: String = r.get(2, &Type::TEXT)?;
        let partition: Option<String> = r.get(3, &Type::TEXT)?;
        let payload: String = r.get(4, &Type::TEXT)?;
        by_queue.entry((tenant, queue)).or_default().push((
            key,
            partition.unwrap_or_else(|| DEFAULT_PARTITION.to_string()),
            payload,
        ));
    }
    let mut woken = Vec::new();
    let mut fired = (Vec::new(), Vec::new(), Vec::new());
    let mut failed = (Vec::new(), Vec::new(), Vec::new());
    for ((tenant, queue), timers) in by_queue {
        let messages = timers
            .iter()
            .map(|(_, partition, payload)| (partition.clone(), payload.clone()))
            .collect();
        let mut prep = PreparedPush::from_messages(queue.clone(), messages);
        let pushed = if careful {
            conn.call(&SAVEPOINT_CALL, &[]).await?;
            match write_pushes(conn, &mut [&mut prep], tenant).await {
                Ok(()) => {
                    conn.call(&RELEASE_CALL, &[]).await?;
                    true
                }
                Err(e) if push_refused(&e) => {
                    tracing::warn!(
                        "timers of queue {queue} not fired, retried in {RETRY_FAILED_FIRE:?}: {e:?}"
                    );
                    // The error made the backend skip to Sync.
                    conn.sync().await?;
                    conn.call(&ROLLBACK_TO_CALL, &[]).await?;
                    false
                }
                Err(e) => return Err(e),
            }
        } else {
            write_pushes(conn, &mut [&mut prep], tenant).await?;
            true
        };
        let target = if pushed {
            woken.push(queue_key(tenant, &queue));
            &mut fired
        } else {
            &mut failed
        };
        for (key, _, _) in timers {
            target.0.push(tenant);
            target.1.push(queue.clone());
            target.2.push(key);
        }
    }
    if !fired.0.is_empty() {
        conn.call(&DELETE_FIRED_CALL, &[&fired.0, &fired.1, &fired.2])
            .await?;
    }
    if !failed.0.is_empty() {
        let delay = RETRY_FAILED_FIRE.as_millis() as i64;
        conn.call(&POSTPONE_CALL, &[&failed.0, &failed.1, &failed.2, &delay])
            .await?;
    }
    if careful {
        conn.call(&COMMIT_CALL, &[]).await?;
    }
    Ok((fired.0.len(), woken))
}
