//! REPLAY DLQ: dead-lettered messages taken out of `queen.log_dlq` and
//! pushed again as new messages, in one transaction.
//!
//! Two calls on the session's connection: `dlq_replay_take_v1` deletes the
//! rows (and returns their segments), then the ordinary push path
//! (`queues::push`, so `log_push_v1`: the one place offsets are assigned)
//! writes the messages. Both run with Flush, so they share one transaction:
//! the client's block, or the implicit transaction that this module ends
//! with a Sync when the statement came alone (simple protocol). A crash
//! before that commit leaves every row in the DLQ; after it, every message
//! is replayed. Anything the engine refuses after the take is raised in the
//! backend first, so the take is rolled back with it and never committed.
//!
//! A replayed message gets a new id and offset, the original's payload and
//! trace id, and the transaction id `replay:<original message id>`: that is
//! its durable link to the original (SHOW MESSAGES shows it), and the
//! queue's deduplication then makes the replay of one message dead-lettered
//! by several groups a single new message (the later rows answer
//! `duplicate` with the first one's id), which every group then receives.

use super::frame::{self, SegmentFrameError};
use super::queues::{self, Limits};
use super::sealing::{KeyRing, SealError, Sealing};
use super::values::{Cell, Params};
use super::ExecError;
use crate::backend::call::{CallEnd, Calls};
use crate::backend::BackendError;
use crate::calls::messages::{ReplayTake, TakenRow};
use crate::calls::transaction::RAISE;
use crate::protocol::{SqlError, SqlState};
use crate::rewrite::dialect::push::{Push, PushRow};
use crate::rewrite::dialect::replay::ReplayDlq;
use crate::rewrite::dialect::Value;
use uuid::Uuid;

/// The prefix of a replayed message's transaction id.
pub const REPLAY_TXN_PREFIX: &str = "replay:";

/// Runs the statement; returns its rows and the queue written to.
pub async fn replay(
    conn: &mut Calls<'_>,
    stmt: &ReplayDlq,
    params: &Params<'_>,
    limits: &Limits,
    tenant: Uuid,
    sealing: &Sealing,
) -> Result<(Vec<Vec<Cell>>, String), ExecError> {
    let queue = params.name(&stmt.queue, "queue")?;
    let partition = stmt
        .partition
        .as_ref()
        .map(|p| params.name(p, "partition"))
        .transpose()?;
    let group = stmt
        .group
        .as_ref()
        .map(|g| params.name(g, "group"))
        .transpose()?;
    let reason_like = stmt
        .reason_like
        .as_ref()
        .map(|r| params.text(r, "REASON LIKE"))
        .transpose()?;
    let limit = params.count(&stmt.limit, "LIMIT")? as i32;
    let take = ReplayTake {
        queue: &queue,
        partition: partition.as_deref(),
        group: group.as_deref(),
        reason_like: reason_like.as_deref(),
        limit,
        tenant,
    };
    let end = conn.end();
    let result = {
        let mut flush = Calls::new(conn, CallEnd::Flush);
        take_and_push(&mut flush, &take, limits, sealing).await
    };
    if end == CallEnd::Sync && !matches!(result, Err(ExecError::Lost(_))) {
        // Commits both calls, or rolls back the failed transaction.
        conn.sync().await?;
    }
    result.map(|rows| (rows, queue))
}

async fn take_and_push(
    conn: &mut Calls<'_>,
    take: &ReplayTake<'_>,
    limits: &Limits,
    sealing: &Sealing,
) -> Result<Vec<Vec<Cell>>, ExecError> {
    let taken = conn.run(take).await?;
    if taken.is_empty() {
        return Ok(Vec::new());
    }
    match push_again(conn, take, &taken, limits, sealing).await {
        Err(ExecError::Refused(refusal)) => Err(raise(conn, refusal).await),
        other => other,
    }
}

async fn push_again(
    conn: &mut Calls<'_>,
    take: &ReplayTake<'_>,
    taken: &[TakenRow],
    limits: &Limits,
    sealing: &Sealing,
) -> Result<Vec<Vec<Cell>>, ExecError> {
    let keys = sealing.keys();
    let mut originals = Vec::with_capacity(taken.len());
    let mut rows = Vec::with_capacity(taken.len());
    for t in taken {
        let f = original_frame(t, &keys)?;
        originals.push(f.message_id);
        rows.push(PushRow {
            payload: Value::Literal(f.payload),
            partition: Some(Value::Literal(t.partition_name.clone())),
            transaction_id: Some(Value::Literal(format!(
                "{REPLAY_TXN_PREFIX}{}",
                f.message_id
            ))),
            trace_id: f.trace_id.map(Value::Literal),
        });
    }
    let push = Push {
        queue: Value::Literal(take.queue.to_string()),
        partition: None,
        rows,
    };
    let written = queues::push(conn, &push, &Params(&[]), limits, take.tenant, sealing).await?;
    // PUSH's rows: message_id, queue, partition, offset, transaction_id, status.
    Ok(written
        .rows()
        .into_iter()
        .zip(originals)
        .zip(taken)
        .map(|((mut pushed, original), t)| {
            let status = pushed.pop().unwrap_or(Cell::Null);
            let mut cells = pushed.into_iter();
            let message_id = cells.next().unwrap_or(Cell::Null);
            let partition = cells.nth(1).unwrap_or(Cell::Null);
            let offset = cells.next().unwrap_or(Cell::Null);
            vec![
                message_id,
                Cell::Uuid(original),
                partition,
                offset,
                Cell::Text(t.consumer_group.clone()),
                status,
            ]
        })
        .collect())
}

/// The dead-lettered message's frame, from its segment.
fn original_frame(t: &TakenRow, keys: &KeyRing) -> Result<frame::Frame, ExecError> {
    let decoded = usize::try_from(t.message_offset - t.base_offset)
        .map_err(|_| SegmentFrameError::Corrupt("offset before its segment"))
        .and_then(|skip| frame::decode_range(&t.blob, skip, 1, keys));
    let (state, why) = match decoded.map(|mut frames| frames.pop()) {
        Ok(Some(f)) => return Ok(f),
        Err(e @ SegmentFrameError::Sealed(SealError::UnknownKey(_))) => {
            (SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE, e.to_string())
        }
        Err(e) => (SqlState::DATA_CORRUPTED, e.to_string()),
        Ok(None) => (SqlState::DATA_CORRUPTED, "no such frame".to_string()),
    };
    Err(ExecError::Refused(SqlError::error(
        state,
        format!(
            "dead-lettered message at offset {} of partition \"{}\" cannot be decoded ({why}); nothing was replayed",
            t.message_offset, t.partition_name
        ),
    )))
}

/// Fails the transaction in the backend with the engine's refusal, so the
/// take is never committed without its push.
async fn raise(conn: &mut Calls<'_>, refusal: SqlError) -> ExecError {
    match conn
        .call(&RAISE, &[&refusal.code(), &refusal.message])
        .await
    {
        Ok(_) | Err(BackendError::Server(_)) => ExecError::Failed(refusal),
        Err(e) => ExecError::Lost(e),
    }
}
