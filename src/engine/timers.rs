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
            row_cells(r, crate::rewrite::dialect::timer::SHOW_COLUMNS).map_err(ExecError::Backend)
        })
        .collect()
}

/// How often each queenwire looks for due timers: a timer fires within
/// about this long after its time, never before.
pub const FIRE_INTERVAL: Duration = Duration::from_millis(200);
/// Timers fired per transaction.
const FIRE_BATCH: i32 = 500;

/// Fires due timers until the task is aborted.
pub async fn fire_loop(pool: Pool, announcer: Announcer) {
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

/// One transaction: claim, push, delete. Returns how many fired.
async fn fire_due(pool: &Pool, announcer: &Announcer) -> Result<usize, ExecError> {
    let mut conn = pool
        .get()
        .await
        .map_err(|e| ExecError::Backend(crate::backend::BackendError::Protocol(e.to_string())))?;
    let result = fire_on(&mut conn).await;
    let status = conn.sync().await;
    let outcome = match (result, status) {
        (Ok(fired), Ok(b'I')) => {
            for key in &fired.1 {
                announcer.pushed(key);
            }
            Ok(fired.0)
        }
        (Ok(_), Ok(_)) => Err(ExecError::Backend(crate::backend::BackendError::Protocol(
            "timer transaction did not commit".into(),
        ))),
        (Err(e), _) => Err(e),
        (_, Err(e)) => Err(ExecError::Backend(e)),
    };
    pool::release(conn);
    outcome
}

async fn fire_on(conn: &mut BackendConn) -> Result<(usize, Vec<String>), ExecError> {
    // Claim, push and delete are one transaction: the claimed rows stay
    // locked until the commit, which is what makes a fire exactly once.
    conn.autosync = false;
    let rows = conn.call(&CLAIM_CALL, &[&FIRE_BATCH]).await?;
    if rows.is_empty() {
        return Ok((0, Vec::new()));
    }
    let mut by_queue: BTreeMap<(Uuid, String), Vec<(String, String)>> = BTreeMap::new();
    let (mut tenants, mut queues, mut keys) = (Vec::new(), Vec::new(), Vec::new());
    for r in &rows {
        let tenant: Uuid = r.get(0, &Type::UUID)?;
        let queue: String = r.get(1, &Type::TEXT)?;
        let key: String = r.get(2, &Type::TEXT)?;
        let partition: Option<String> = r.get(3, &Type::TEXT)?;
        let payload: String = r.get(4, &Type::TEXT)?;
        by_queue.entry((tenant, queue.clone())).or_default().push((
            partition.unwrap_or_else(|| DEFAULT_PARTITION.to_string()),
            payload,
        ));
        tenants.push(tenant);
        queues.push(queue);
        keys.push(key);
    }
    let mut woken = Vec::new();
    for ((tenant, queue), messages) in by_queue {
        let mut prep = PreparedPush::from_messages(queue.clone(), messages);
        write_pushes(conn, &mut [&mut prep], tenant).await?;
        woken.push(queue_key(tenant, &queue));
    }
    conn.call(&DELETE_FIRED_CALL, &[&tenants, &queues, &keys])
        .await?;
    Ok((rows.len(), woken))
}
