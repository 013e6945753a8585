//! SHOW MESSAGES, SHOW MESSAGE and SHOW TRACE: reading messages without
//! leasing them.
//! The procedures hand back whole segments and the group's state beside
//! them (`calls::messages`); here the frames are decoded, cut to the
//! browse's start and limit, and each message gets its state. Nothing here
//! writes: no cursor, lease or retry count changes.

use super::frame::{self, SegmentFrameError};
use super::sealing::{KeyRing, SealError};
use super::values::{micros, system_time, Cell, Params};
use super::ExecError;
use crate::backend::call::Calls;
use crate::calls::messages::{Browse as BrowseCall, BrowseMessage, SegmentRow, Trace};
use crate::protocol::{SqlError, SqlState};
use crate::rewrite::bind::parse_error;
use crate::rewrite::dialect::browse::{
    check_message_id, check_offset, check_trace_id, Browse, BrowseFrom, ShowMessage, ShowMessages,
    MAX_TRACE_MESSAGES,
};
use std::time::Duration;
use uuid::Uuid;

pub async fn execute(
    conn: &mut Calls<'_>,
    stmt: &Browse,
    params: &Params<'_>,
    tenant: Uuid,
    keys: &KeyRing,
) -> Result<Vec<Vec<Cell>>, ExecError> {
    match stmt {
        Browse::Messages(m) => show_messages(conn, m, params, tenant, keys).await,
        Browse::Message(m) => show_message(conn, m, params, tenant, keys).await,
        Browse::Trace(t) => {
            let trace = params.text(t, "trace id")?;
            check_trace_id(&trace).map_err(parse_error)?;
            show_trace(conn, &trace, tenant, keys).await
        }
    }
}

/// One row per (message, group): the frame's own fields, the state named
/// as a trace reads it (`pushed` for what the group has not been handed).
async fn show_trace(
    conn: &mut Calls<'_>,
    trace: &str,
    tenant: Uuid,
    keys: &KeyRing,
) -> Result<Vec<Vec<Cell>>, ExecError> {
    let rows = conn
        .run(&Trace {
            trace_id: trace,
            limit: MAX_TRACE_MESSAGES as i32,
            tenant,
        })
        .await?;
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let Some((offset, f)) = frames(&row.segment, row.message_offset, keys)?
            .next()
            .filter(|(_, f)| f.message_id == row.message_id)
        else {
            continue;
        };
        let state = match (&row.consumer_group, row.segment.state(offset)) {
            (None, _) | (Some(_), "pending") => "pushed",
            (Some(_), "consumed") => "acked",
            (Some(_), other) => other,
        };
        out.push(vec![
            Cell::Text(row.queue),
            Cell::Text(row.segment.partition_name.clone()),
            Cell::Int8(offset),
            Cell::Uuid(f.message_id),
            Cell::unix_micros(f.created_at_micros),
            Cell::opt_text(row.consumer_group),
            Cell::Text(state.to_string()),
            Cell::opt_text(f.transaction_id),
            Cell::Jsonb(f.payload),
        ]);
    }
    Ok(out)
}

async fn show_messages(
    conn: &mut Calls<'_>,
    m: &ShowMessages,
    params: &Params<'_>,
    tenant: Uuid,
    keys: &KeyRing,
) -> Result<Vec<Vec<Cell>>, ExecError> {
    let queue = params.name(&m.queue, "queue")?;
    let partition = m
        .partition
        .as_ref()
        .map(|p| params.name(p, "partition"))
        .transpose()?;
    let group = m
        .group
        .as_ref()
        .map(|g| params.name(g, "group"))
        .transpose()?;
    let (from_offset, from_time) = match &m.from {
        BrowseFrom::Beginning => (None, None),
        BrowseFrom::Offset(n) => {
            let n = params.integer(n, "OFFSET")?;
            (Some(check_offset(n).map_err(parse_error)?), None)
        }
        BrowseFrom::Time(t) => (None, Some(params.text(t, "FROM")?)),
    };
    let limit = params.count(&m.limit, "LIMIT")? as usize;
    let segments = conn
        .run(&BrowseCall {
            queue: &queue,
            partition: partition.as_deref(),
            group: group.as_deref(),
            from_offset,
            from_time,
            limit: limit as i32,
            tenant,
        })
        .await?;
    let mut out = Vec::with_capacity(limit.min(1024));
    for segment in &segments {
        if out.len() >= limit {
            break;
        }
        let from = segment.from_offset.max(segment.base_offset);
        let not_before = segment.from_time.map(micros);
        for (offset, f) in frames(segment, from, keys)? {
            if out.len() >= limit {
                break;
            }
            if not_before.is_some_and(|t| f.created_at_micros < t) {
                continue;
            }
            out.push(message_row(segment, offset, f));
        }
    }
    Ok(out)
}

async fn show_message(
    conn: &mut Calls<'_>,
    m: &ShowMessage,
    params: &Params<'_>,
    tenant: Uuid,
    keys: &KeyRing,
) -> Result<Vec<Vec<Cell>>, ExecError> {
    let id = check_message_id(&params.text(&m.message_id, "message id")?).map_err(parse_error)?;
    let queue = params.name(&m.queue, "queue")?;
    let group = m
        .group
        .as_ref()
        .map(|g| params.name(g, "group"))
        .transpose()?;
    // Only a UUIDv7 carries the time that finds its segment; queenwire
    // makes no other kind, so another id names no message.
    let Some((secs, nanos)) = id.get_timestamp().map(|t| t.to_unix()) else {
        return Ok(Vec::new());
    };
    let around = system_time(0) + Duration::new(secs, nanos);
    let segments = conn
        .run(&BrowseMessage {
            queue: &queue,
            around,
            group: group.as_deref(),
            tenant,
        })
        .await?;
    for segment in &segments {
        for (offset, f) in frames(segment, segment.base_offset, keys)? {
            if f.message_id == id {
                return Ok(vec![message_row(segment, offset, f)]);
            }
        }
    }
    Ok(Vec::new())
}

/// The frames of a segment from offset `from` on, with their offsets.
fn frames(
    segment: &SegmentRow,
    from: i64,
    keys: &KeyRing,
) -> Result<impl Iterator<Item = (i64, frame::Frame)>, ExecError> {
    let skip = usize::try_from(from - segment.base_offset).unwrap_or(0);
    let take = usize::try_from(segment.message_count)
        .unwrap_or(0)
        .saturating_sub(skip);
    let decoded = frame::decode_range(&segment.blob, skip, take, keys).map_err(|e| {
        // An encrypted segment this queenwire has no key for: the browse
        // says so rather than showing rows without their payload.
        let state = match e {
            SegmentFrameError::Sealed(SealError::UnknownKey(_)) => {
                SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE
            }
            _ => SqlState::DATA_CORRUPTED,
        };
        ExecError::Refused(SqlError::error(
            state,
            format!(
                "segment {} of partition \"{}\": {e}",
                segment.base_offset, segment.partition_name
            ),
        ))
    })?;
    let first = segment.base_offset + skip as i64;
    Ok(decoded
        .into_iter()
        .enumerate()
        .map(move |(i, f)| (first + i as i64, f)))
}

fn message_row(segment: &SegmentRow, offset: i64, f: frame::Frame) -> Vec<Cell> {
    vec![
        Cell::Text(segment.partition_name.clone()),
        Cell::Int8(offset),
        Cell::Uuid(f.message_id),
        Cell::unix_micros(f.created_at_micros),
        Cell::opt_text(f.transaction_id),
        Cell::opt_text(f.trace_id),
        Cell::Jsonb(f.payload),
        Cell::Text(segment.state(offset).to_string()),
    ]
}
