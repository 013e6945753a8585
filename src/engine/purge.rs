//! `PURGE TENANT`: calls `queen.tenant_purge_step_v1` until it reports the
//! tenant gone. Each step is a transaction of its own (the calls end with
//! Sync, and the statement is refused inside a transaction block), so no
//! step holds locks longer than one batch takes, and a purge cut short
//! (crash, lost connection) is finished by running the statement again.
//! Who may run it is the session's business (administrators only).

use super::values::Cell;
use super::ExecError;
use crate::backend::call::Calls;
use crate::calls::purge::{PurgeStep, PurgeStepRow};
use uuid::Uuid;

/// Rows per table one step deletes at most: small enough that a step's
/// locks are brief next to the write path, large enough that a tenant of a
/// million messages is a few hundred round trips (chosen, not tuned;
/// one figure in docs/internals/storage.md).
pub const BATCH: i32 = 500;

/// Runs the steps to the end; one row of totals.
pub async fn purge_tenant(conn: &mut Calls<'_>, tenant: Uuid) -> Result<Vec<Vec<Cell>>, ExecError> {
    let mut total = PurgeStepRow::default();
    // The first step's start: the queues made after it (re-created by a
    // push racing the purge) are left alone.
    let mut before = None;
    loop {
        let rows = conn
            .run(&PurgeStep {
                tenant,
                batch: BATCH,
                before,
            })
            .await?;
        let step = rows.into_iter().next().unwrap_or(PurgeStepRow {
            done: true,
            ..PurgeStepRow::default()
        });
        total.kv_keys += step.kv_keys;
        total.timers += step.timers;
        total.queues += step.queues;
        total.partitions += step.partitions;
        total.segments += step.segments;
        total.messages += step.messages;
        total.dlq += step.dlq;
        before = before.or(step.started);
        if step.done {
            break;
        }
    }
    Ok(vec![vec![
        Cell::Uuid(tenant),
        Cell::Int8(total.queues),
        Cell::Int8(total.partitions),
        Cell::Int8(total.segments),
        Cell::Int8(total.messages),
        Cell::Int8(total.dlq),
        Cell::Int8(total.kv_keys),
        Cell::Int8(total.timers),
    ]])
}
