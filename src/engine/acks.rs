//! ACK and RENEW: receipts checked here (a forged or altered one fails the
//! statement before any SQL runs), then one `queen.*` call on the session's
//! backend connection. Plain ACKs outside blocks are fused across sessions
//! (`fusion/ack.rs`), which calls `ack_receipts` too.

use super::receipt::{InvalidReceipt, Receipt, ReceiptKey};
use super::values::{Cell, Params};
use super::ExecError;
use crate::backend::call::Calls;
use crate::calls::acks::{
    Ack as AckCall, AckRunRow, AckRuns, AckShared, Renew as RenewCall, RenewRow, RenewShared,
};
use crate::protocol::SqlError;
use crate::protocol::SqlState;
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

/// The status of each receipt, in order (`stale` for one the procedure did
/// not answer). A shared group's receipts go to `log_ack_shared_v1`, each
/// message alone; an ordered group's as [`ack_ordered`] says. One call for
/// each model the receipts name.
pub async fn ack_receipts(
    conn: &mut Calls<'_>,
    receipts: &[Receipt],
    failed: bool,
    reason: Option<String>,
    tenant: Uuid,
) -> Result<Vec<String>, ExecError> {
    if !receipts.iter().any(|r| r.shared) {
        return ack_ordered(conn, receipts, failed, reason, tenant).await;
    }
    let (shared, ordered): (Vec<usize>, Vec<usize>) =
        (0..receipts.len()).partition(|&i| receipts[i].shared);
    let mut status = vec![String::from("stale"); receipts.len()];
    let call = AckShared(AckCall {
        partition_ids: shared.iter().map(|&i| receipts[i].partition_id).collect(),
        offsets: shared.iter().map(|&i| receipts[i].offset).collect(),
        groups: shared.iter().map(|&i| receipts[i].group.as_str()).collect(),
        lease_tokens: shared.iter().map(|&i| receipts[i].lease_token).collect(),
        failed,
        reason: reason.clone(),
        tenant,
    });
    for row in conn.run(&call).await? {
        if let Some(&i) = usize::try_from(row.idx).ok().and_then(|k| shared.get(k)) {
            status[i] = row.status;
        }
    }
    if !ordered.is_empty() {
        let of_ordered: Vec<Receipt> = ordered.iter().map(|&i| receipts[i].clone()).collect();
        let answers = ack_ordered(conn, &of_ordered, failed, reason, tenant).await?;
        for (i, answer) in ordered.into_iter().zip(answers) {
            status[i] = answer;
        }
    }
    Ok(status)
}

/// An ordered group's receipts, from one call: a plain ACK whose receipts
/// make fewer runs than receipts (a batch acknowledged entire is one) goes
/// to `log_ack_v2` as runs, any other to `log_ack_v1` receipt by receipt.
async fn ack_ordered(
    conn: &mut Calls<'_>,
    receipts: &[Receipt],
    failed: bool,
    reason: Option<String>,
    tenant: Uuid,
) -> Result<Vec<String>, ExecError> {
    let mut status = vec![String::from("stale"); receipts.len()];
    if !failed {
        if let Some(runs) = Runs::of(receipts, tenant) {
            for row in conn.run(&runs.call).await? {
                runs.answer(receipts, &row, &mut status);
            }
            return Ok(status);
        }
    }
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

/// A plain ACK's receipts as runs: the receipts of one (partition, group,
/// lease token) whose offsets follow each other (a repeat stays in its run).
struct Runs<'a> {
    call: AckRuns<'a>,
    /// The receipts' positions, by (partition, group, token, offset): run
    /// `r` is `order[starts[r]..starts[r + 1]]`.
    order: Vec<usize>,
    starts: Vec<usize>,
}

impl<'a> Runs<'a> {
    /// `None` when the receipts make as many runs as there are receipts.
    fn of(receipts: &'a [Receipt], tenant: Uuid) -> Option<Runs<'a>> {
        let key = |r: &'a Receipt| (r.partition_id, r.group.as_str(), r.lease_token, r.offset);
        let mut order: Vec<usize> = (0..receipts.len()).collect();
        order.sort_unstable_by_key(|&i| key(&receipts[i]));
        let mut call = AckRuns {
            partition_ids: Vec::new(),
            groups: Vec::new(),
            lease_tokens: Vec::new(),
            from: Vec::new(),
            to: Vec::new(),
            tenant,
        };
        let mut starts = Vec::new();
        for (at, &i) in order.iter().enumerate() {
            let r = &receipts[i];
            let follows = at > 0 && {
                let last = &receipts[order[at - 1]];
                (last.partition_id, last.group.as_str(), last.lease_token)
                    == (r.partition_id, r.group.as_str(), r.lease_token)
                    && (last.offset == r.offset || last.offset.checked_add(1) == Some(r.offset))
            };
            if follows {
                if let Some(to) = call.to.last_mut() {
                    *to = r.offset;
                }
            } else {
                starts.push(at);
                call.partition_ids.push(r.partition_id);
                call.groups.push(r.group.as_str());
                call.lease_tokens.push(r.lease_token);
                call.from.push(r.offset);
                call.to.push(r.offset);
            }
        }
        if starts.len() == receipts.len() {
            return None;
        }
        starts.push(order.len());
        Some(Runs {
            call,
            order,
            starts,
        })
    }

    /// One row of `log_ack_v2`: the status of its run's receipts, or of
    /// those of one offset of it.
    fn answer(&self, receipts: &[Receipt], row: &AckRunRow, status: &mut [String]) {
        let Some(run) = usize::try_from(row.idx)
            .ok()
            .filter(|&r| r + 1 < self.starts.len())
        else {
            return;
        };
        let mut members = &self.order[self.starts[run]..self.starts[run + 1]];
        if let Some(offset) = row.message_offset {
            // A run's receipts are in offset order.
            let first = members.partition_point(|&i| receipts[i].offset < offset);
            let end = members.partition_point(|&i| receipts[i].offset <= offset);
            members = &members[first..end];
        }
        for &i in members {
            status[i].clone_from(&row.status);
        }
    }
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
    let (shared, ordered): (Vec<usize>, Vec<usize>) =
        (0..receipts.len()).partition(|&i| receipts[i].shared);
    let mut expiry: Vec<Option<SystemTime>> = vec![None; texts.len()];
    if !ordered.is_empty() {
        let rows = conn
            .run(&RenewCall {
                partition_ids: ordered.iter().map(|&i| receipts[i].partition_id).collect(),
                groups: ordered
                    .iter()
                    .map(|&i| receipts[i].group.as_str())
                    .collect(),
                lease_tokens: ordered.iter().map(|&i| receipts[i].lease_token).collect(),
                extend_ms,
                tenant,
            })
            .await?;
        answer_renew(rows, &ordered, &mut expiry);
    }
    if !shared.is_empty() {
        let rows = conn
            .run(&RenewShared {
                partition_ids: shared.iter().map(|&i| receipts[i].partition_id).collect(),
                offsets: shared.iter().map(|&i| receipts[i].offset).collect(),
                groups: shared.iter().map(|&i| receipts[i].group.as_str()).collect(),
                lease_tokens: shared.iter().map(|&i| receipts[i].lease_token).collect(),
                extend_ms,
                tenant,
            })
            .await?;
        answer_renew(rows, &shared, &mut expiry);
    }
    Ok(texts
        .into_iter()
        .zip(expiry)
        .map(|(t, e)| vec![Cell::Text(t), Cell::timestamp(e)])
        .collect())
}

/// Each row's expiry into the slot of the receipt it answers (`positions`:
/// the receipts of the call, in its order).
fn answer_renew(rows: Vec<RenewRow>, positions: &[usize], expiry: &mut [Option<SystemTime>]) {
    for row in rows {
        if let Some(slot) = usize::try_from(row.idx)
            .ok()
            .and_then(|k| positions.get(k))
            .and_then(|&i| expiry.get_mut(i))
        {
            *slot = row.lease_expires_at;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn receipt(partition_id: i64, offset: i64, group: &str, token: u128) -> Receipt {
        Receipt {
            partition_id,
            offset,
            lease_token: Uuid::from_u128(token),
            group: group.to_string(),
            shared: false,
        }
    }

    #[test]
    fn receipts_make_runs_of_following_offsets_per_lease() {
        let receipts = [
            receipt(7, 12, "g", 1),
            receipt(3, 0, "g", 2),
            receipt(7, 10, "g", 1),
            receipt(7, 11, "g", 1),
            receipt(7, 11, "g", 1),
            receipt(7, 14, "g", 1),
            receipt(7, 13, "h", 1),
            receipt(7, 15, "g", 9),
        ];
        let runs = Runs::of(&receipts, Uuid::nil()).expect("fewer runs than receipts");
        let call = &runs.call;
        assert_eq!(call.partition_ids, [3, 7, 7, 7, 7]);
        assert_eq!(call.groups, ["g", "g", "g", "g", "h"]);
        assert_eq!(call.from, [0, 10, 14, 15, 13]);
        assert_eq!(call.to, [0, 12, 14, 15, 13]);
        assert_eq!(call.lease_tokens[3], Uuid::from_u128(9));
        // The run 10..=12 settled whole, its offset 11 (twice) alone
        // again, the others unanswered (stale).
        let mut status = vec![String::from("stale"); receipts.len()];
        let row = |idx, message_offset, status: &str| AckRunRow {
            idx,
            message_offset,
            status: status.to_string(),
        };
        runs.answer(&receipts, &row(1, Some(11), "x"), &mut status);
        assert_eq!(status[3..5], ["x", "x"]);
        runs.answer(&receipts, &row(1, None, "acked"), &mut status);
        runs.answer(&receipts, &row(0, Some(5), "acked"), &mut status);
        runs.answer(&receipts, &row(9, None, "acked"), &mut status);
        runs.answer(&receipts, &row(-1, None, "acked"), &mut status);
        let want = [
            "acked", "stale", "acked", "acked", "acked", "stale", "stale", "stale",
        ];
        assert_eq!(status, want);
    }

    #[test]
    fn receipts_of_distinct_offsets_or_leases_make_no_runs() {
        let receipts = [
            receipt(1, 0, "g", 1),
            receipt(1, 2, "g", 1),
            receipt(1, 1, "g", 2),
            receipt(2, 1, "g", 1),
        ];
        assert!(Runs::of(&receipts, Uuid::nil()).is_none());
        assert!(Runs::of(&[], Uuid::nil()).is_none());
    }
}
