//! A batch's messages and the evaluation of a stream's expressions over
//! them: always on a connection of the tenant's own backend role
//! ([`super::Evaluators`]), bounded in time, and, when the expressions fail
//! at run time, the bisection that finds the one message to blame.

use super::Evaluators;
use crate::backend::call::CallEnd;
use crate::backend::pool;
use crate::calls::queues::PopRow;
use crate::calls::stream_cycle::ActiveRow;
use crate::calls::streams::{Eval, EvalRow};
use crate::engine::frame;
use crate::engine::sealing::KeyRing;
use crate::engine::ExecError;
use crate::protocol::{SqlError, SqlState};
use std::time::Duration;

/// The longest one batch's evaluation may take (well inside the runner's
/// [`super::runner::LEASE`]).
pub const EVAL_TIMEOUT: Duration = Duration::from_secs(5);

/// One decoded message of a batch.
pub struct Message {
    pub offset: i64,
    pub created_us: i64,
    pub payload: String,
    pub transaction_id: Option<String>,
}

pub fn decode(rows: &[PopRow], keys: &KeyRing) -> Result<Vec<Message>, ExecError> {
    let mut out = Vec::new();
    for row in rows {
        let first = row.from_offset.max(row.base_offset);
        if row.to_offset < first {
            continue;
        }
        let frames = frame::decode_range(
            &row.blob,
            (first - row.base_offset) as usize,
            (row.to_offset - first + 1) as usize,
            keys,
        )
        .map_err(|e| SqlError::error(SqlState::DATA_CORRUPTED, e.to_string()))?;
        for (i, f) in frames.into_iter().enumerate() {
            out.push(Message {
                offset: first + i as i64,
                created_us: f.created_at_micros,
                payload: f.payload,
                transaction_id: f.transaction_id,
            });
        }
    }
    Ok(out)
}

/// The batch as `stream_eval_v1`'s JSON input.
fn eval_input(messages: &[Message], partition: &str) -> String {
    let mut out = String::from("[");
    let part = crate::json::string(partition);
    for (i, m) in messages.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let txn = m
            .transaction_id
            .as_deref()
            .map_or("null".to_string(), crate::json::string);
        out.push_str(&format!(
            "{{\"ord\":{i},\"payload\":{},\"partition\":{part},\"created_us\":{},\"transaction_id\":{txn}}}",
            m.payload, m.created_us
        ));
    }
    out.push(']');
    out
}

/// The batch's evaluation failed: the first message it fails on, found by
/// bisection (each step evaluates a prefix), with the messages before it
/// kept in `messages` and their evaluation. `None` when the expressions
/// fail without any message (a definition-level error, say a function the
/// expression calls was dropped): then no message is to blame, and none is
/// failed.
pub async fn poisoned(
    evaluators: &Evaluators,
    stream: &ActiveRow,
    messages: &mut Vec<Message>,
    partition: &str,
) -> Result<Option<(Vec<EvalRow>, i64)>, ExecError> {
    match evaluate(evaluators, stream, &[], partition).await {
        Ok(_) => {}
        Err(ExecError::Failed(_)) => return Ok(None),
        Err(e) => return Err(e),
    }
    let (mut lo, mut hi) = (0, messages.len() - 1);
    while lo < hi {
        let mid = (lo + hi) / 2;
        match evaluate(evaluators, stream, &messages[..=mid], partition).await {
            Ok(_) => lo = mid + 1,
            Err(ExecError::Failed(_)) => hi = mid,
            Err(e) => return Err(e),
        }
    }
    let offset = messages[lo].offset;
    messages.truncate(lo);
    let rows = if messages.is_empty() {
        Vec::new()
    } else {
        evaluate(evaluators, stream, messages, partition).await?
    };
    Ok(Some((rows, offset)))
}

pub async fn evaluate(
    evaluators: &Evaluators,
    stream: &ActiveRow,
    messages: &[Message],
    partition: &str,
) -> Result<Vec<EvalRow>, ExecError> {
    let input = eval_input(messages, partition);
    on_tenant_role(evaluators, stream, &stream.eval_sql, &input).await
}

/// The stream's reduce fold over `jobs` (see `queen.stream_reduce_sql_v1`),
/// on the tenant's role like the evaluation, bounded the same. It runs
/// while the cycle's transaction is open on the engine's connection, which
/// did not see its error: a failure is [`ExecError::Refused`], so that
/// transaction is failed and rolled back.
pub async fn fold(
    evaluators: &Evaluators,
    stream: &ActiveRow,
    jobs: &str,
) -> Result<Vec<EvalRow>, ExecError> {
    let Some(sql) = stream.reduce_sql.as_deref() else {
        return Err(ExecError::Refused(SqlError::error(
            SqlState::INTERNAL_ERROR,
            "a reduce aggregate without its fold SELECT",
        )));
    };
    match on_tenant_role(evaluators, stream, sql, jobs).await {
        Err(ExecError::Failed(e)) => Err(ExecError::Refused(e)),
        other => other,
    }
}

async fn on_tenant_role(
    evaluators: &Evaluators,
    stream: &ActiveRow,
    sql: &str,
    input: &str,
) -> Result<Vec<EvalRow>, ExecError> {
    let Some(eval_pool) = evaluators.pool(stream.tenant) else {
        return Err(ExecError::Refused(SqlError::error(
            SqlState::INSUFFICIENT_PRIVILEGE,
            "the stream's tenant has no backend role to evaluate its expressions with (a user with passthrough full or read_only)",
        )));
    };
    let mut conn = pool::checkout(&eval_pool).await.map_err(ExecError::Lost)?;
    let call = Eval {
        sql,
        messages: input,
    };
    let rows = tokio::time::timeout(EVAL_TIMEOUT, conn.run(&call, CallEnd::Sync)).await;
    let Ok(rows) = rows else {
        // One tenant's slow expression must not hold every other stream of
        // this runner: the connection goes (its backend ends the statement
        // when it next talks to the socket), the batch comes back.
        pool::discard(conn);
        return Err(ExecError::Refused(SqlError::error(
            SqlState::QUERY_CANCELED,
            format!("the stream's expressions took longer than {EVAL_TIMEOUT:?} over one batch"),
        )));
    };
    pool::release(conn);
    Ok(rows?)
}
