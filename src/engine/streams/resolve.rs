//! What PostgreSQL decides for a cycle's windows once its batch is
//! assigned (docs/streams.md, Aggregates): text min/max, compared in the
//! database's collation, and reduce folds, through the tenant's own
//! function. The window rules keep their inputs pending
//! ([`super::aggregate::AggState::is_pending`]); this resolves them all,
//! one call each, before the windows are saved or emitted.

use super::aggregate::AggState;
use super::evaluate::fold;
use super::window::Partition;
use super::Evaluators;
use crate::backend::call::Calls;
use crate::calls::stream_cycle::{ActiveRow, Extrema};
use crate::engine::ExecError;
use crate::protocol::{SqlError, SqlState};

/// What PostgreSQL decides for the cycle's windows, before they are saved
/// or emitted: text min/max in one call on this connection (in the
/// cycle's transaction; the database's collation), reduce folds in one
/// call on the tenant's role (a user function). Either failing fails the
/// cycle, which rolls back: the batch comes back after its lease.
pub async fn pending(
    conn: &mut Calls<'_>,
    evaluators: &Evaluators,
    stream: &ActiveRow,
    part: &mut Partition<'_>,
) -> Result<(), ExecError> {
    let mut pending = part.pending();
    if pending.is_empty() {
        return Ok(());
    }
    let (mut texts, mut folds) = (Vec::new(), Vec::new());
    for (id, (agg, state)) in pending.iter().enumerate() {
        match &**state {
            AggState::Text { best, pending, .. } => {
                let values: Vec<&str> = best.iter().chain(pending).map(String::as_str).collect();
                texts.push(format!("{{\"i\":{id},\"v\":[{}]}}", values.join(",")));
            }
            AggState::Reduce { state, pending } => {
                let s = state
                    .as_ref()
                    .map_or(String::new(), |s| format!(",\"s\":[{s}]"));
                folds.push(format!(
                    "{{\"id\":{id},\"a\":{}{s},\"p\":[{}]}}",
                    agg + 1,
                    pending.join(",")
                ));
            }
            _ => {}
        }
    }
    if !texts.is_empty() {
        let jobs = format!("[{}]", texts.join(","));
        for row in conn.run(&Extrema { jobs: &jobs }).await? {
            if let Some((_, state)) = usize::try_from(row.id)
                .ok()
                .and_then(|i| pending.get_mut(i))
            {
                let max = matches!(&**state, AggState::Text { max: true, .. });
                if let Some(v) = if max { row.hi } else { row.lo } {
                    state.resolve(v);
                }
            }
        }
    }
    if !folds.is_empty() {
        let jobs = format!("[{}]", folds.join(","));
        for row in fold(evaluators, stream, &jobs).await? {
            if let Some((_, state)) = usize::try_from(row.ord)
                .ok()
                .and_then(|i| pending.get_mut(i))
            {
                if let Some(Some(v)) = row.vals.into_iter().next() {
                    state.resolve(v);
                }
            }
        }
    }
    if pending.iter().any(|(_, s)| s.is_pending()) {
        return Err(ExecError::Refused(SqlError::error(
            SqlState::INTERNAL_ERROR,
            "a stream's text min/max or reduce came back without a value",
        )));
    }
    Ok(())
}
