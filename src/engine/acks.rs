//! ACK and RENEW: receipts checked here (a forged or altered one fails the
//! statement before any SQL runs), then one `queen.*` call on the session's
//! backend connection. Plain ACKs outside blocks are fused across sessions
//! (`fusion/ack.rs`), which calls `ack_receipts` too.

use super::receipt::{InvalidReceipt, Receipt, ReceiptKey};
use super::values::{Cell, Params};
use super::ExecError;
use crate::backend::call::Calls;
use crate::protocol::SqlError;
use crate::protocol::SqlState;
use crate::rewrite::calls::queues::{Ack as AckCall, Renew as RenewCall};
use crate::rewrite::dialect::ack::{Ack, AckOutcome, Renew};
use crate::rewrite::dialect::Value;
use std::time::SystemTime;
use uuid::Uuid;

/// Receipts as written and as decoded (a forged or altered one fails the
/// statement before anything runs).
pub fn decode_receipts(
    receipts: &[Value<String>],
    params: &Params<'_>,
    key: &ReceiptKey,
) -> Result<(Vec<String>, Vec<Receipt>), SqlError> {
    let mut texts = Vec::with_capacity(receipts.len());
    let mut decoded = Vec::with_capacity(receipts.len());
    for r in receipts {
        let text = params.text(r, "receipt")?;
        let receipt = key.decode(&text).map_err(|InvalidReceipt| {
            SqlError::error(
                SqlState::INVALID_TEXT_REPRESENTATION,
                "invalid receipt: not one this queue issued, or altered",
            )
        })?;
        texts.push(text);
        decoded.push(receipt);
    }
    Ok((texts, decoded))
}

/// ACK; `released` is told the (partition id, group) of every receipt once
/// the call returned, and whether the ACK was plain (not FAILED): their
/// leases may be gone (the hot list's cue).
pub async fn ack(
    conn: &mut Calls<'_>,
    stmt: &Ack,
    params: &Params<'_>,
    key: &ReceiptKey,
    tenant: Uuid,
    released: impl FnOnce(&[(i64, &str)], bool),
) -> Result<Vec<Vec<Cell>>, ExecError> {
    let (texts, receipts) = decode_receipts(&stmt.receipts, params, key)?;
    let (failed, reason) = match &stmt.outcome {
        AckOutcome::Success => (false, None),
        AckOutcome::Failed { reason } => (
            true,
            reason
                .as_ref()
                .map(|r| params.opt_text(r))
                .transpose()?
                .flatten(),
        ),
    };
    let status = ack_receipts(conn, &receipts, failed, reason, tenant).await?;
    let partitions: Vec<(i64, &str)> = receipts
        .iter()
        .map(|r| (r.partition_id, r.group.as_str()))
        .collect();
    released(&partitions, !failed);
    Ok(ack_rows(texts, status))
}

/// ACK's result rows: each receipt as written, with its status.
pub fn ack_rows(texts: Vec<String>, status: Vec<String>) -> Vec<Vec<Cell>> {
    texts
        .into_iter()
        .zip(status)
        .map(|(t, s)| vec![Cell::Text(t), Cell::Text(s)])
        .collect()
}

/// One `log_ack_v1` call: the status of each receipt, in order (`stale`
/// for one the procedure did not answer).
pub async fn ack_receipts(
    conn: &mut Calls<'_>,
    receipts: &[Receipt],
    failed: bool,
    reason: Option<String>,
    tenant: Uuid,
) -> Result<Vec<String>, ExecError> {
    let rows = conn
        .run(&AckCall {
            partition_ids: receipts.iter().map(|r| r.partition_id).collect(),
            offsets: receipts.iter().map(|r| r.offset).collect(),
            groups: receipts.iter().map(|r| r.group.as_str()).collect(),
            lease_tokens: receipts.iter().map(|r| r.lease_token).collect(),
            failed,
            reason,
            tenant,
        })
        .await?;
    let mut status = vec![String::from("stale"); receipts.len()];
    for row in rows {
        if let Some(slot) = usize::try_from(row.idx)
            .ok()
            .and_then(|i| status.get_mut(i))
        {
            *slot = row.status;
        }
    }
    Ok(status)
}

pub async fn renew(
    conn: &mut Calls<'_>,
    stmt: &Renew,
    params: &Params<'_>,
    key: &ReceiptKey,
    tenant: Uuid,
) -> Result<Vec<Vec<Cell>>, ExecError> {
    let (texts, receipts) = decode_receipts(&stmt.receipts, params, key)?;
    let extend_ms: Option<i64> = stmt
        .duration
        .as_ref()
        .map(|d| params.duration(d, "RENEW FOR"))
        .transpose()?
        .map(|d| d.as_millis().min(i64::MAX as u128) as i64);
    let partition_ids: Vec<i64> = receipts.iter().map(|r| r.partition_id).collect();
    let groups: Vec<&str> = receipts.iter().map(|r| r.group.as_str()).collect();
    let tokens: Vec<Uuid> = receipts.iter().map(|r| r.lease_token).collect();
    let rows = conn
        .run(&RenewCall {
            partition_ids,
            groups,
            lease_tokens: tokens,
            extend_ms,
            tenant,
        })
        .await?;
    let mut expiry: Vec<Option<SystemTime>> = vec![None; texts.len()];
    for row in rows {
        if let Some(slot) = usize::try_from(row.idx)
            .ok()
            .and_then(|i| expiry.get_mut(i))
        {
            *slot = row.lease_expires_at;
        }
    }
    Ok(texts
        .into_iter()
        .zip(expiry)
        .map(|(t, e)| vec![Cell::Text(t), Cell::timestamp(e)])
        .collect())
}
