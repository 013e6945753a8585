//! The KV statements: each one call of `queen.kv_apply_v1`
//! (`rewrite/build/kv.rs` builds its batch), which applies the batch at one
//! instant and takes rows in ascending (namespace, key) byte order. Every
//! rule of the store (existence, versions, preconditions) lives in the
//! procedure, in one place; the engine adds the operator's pause switch and
//! the soft quota.

use super::values::{Cell, Params};
use super::ExecError;
use crate::backend::call::Calls;
use crate::protocol::SqlError;
use crate::protocol::SqlState;
use crate::rewrite::build::kv::apply;
use crate::rewrite::dialect::kv::KvStatement;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use uuid::Uuid;

/// The KV surface's switches and the soft quota: a pause flag an operator
/// flips at run time, and per-tenant usage as last measured by the sweeper
/// plus what this process wrote since (a late, soft limit by design: no
/// write path touches a counter row).
#[derive(Default)]
pub struct KvState {
    paused: AtomicBool,
    quotas: Mutex<HashMap<Uuid, Quota>>,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct Quota {
    pub max_keys: Option<i64>,
    pub max_bytes: Option<i64>,
    pub used_keys: i64,
    pub used_bytes: i64,
}

impl KvState {
    pub fn set_paused(&self, paused: bool) {
        self.paused.store(paused, Ordering::SeqCst);
    }

    pub fn paused(&self) -> bool {
        self.paused.load(Ordering::SeqCst)
    }

    /// Replaces the measured usage (the quota poll).
    pub fn set_quotas(&self, quotas: HashMap<Uuid, Quota>) {
        if let Ok(mut q) = self.quotas.lock() {
            *q = quotas;
        }
    }

    /// Counts bytes written since the last poll against the tenant.
    fn note_write(&self, tenant: Uuid, bytes: i64) {
        if let Ok(mut q) = self.quotas.lock() {
            if let Some(quota) = q.get_mut(&tenant) {
                quota.used_bytes += bytes;
            }
        }
    }

    fn over_quota(&self, tenant: Uuid) -> Option<String> {
        let q = self.quotas.lock().ok()?.get(&tenant).copied()?;
        if q.max_keys.is_some_and(|m| q.used_keys >= m) {
            return Some(format!(
                "KV quota exceeded: {} keys of {} allowed",
                q.used_keys,
                q.max_keys.unwrap_or(0)
            ));
        }
        if q.max_bytes.is_some_and(|m| q.used_bytes >= m) {
            return Some(format!(
                "KV quota exceeded: {} bytes of {} allowed",
                q.used_bytes,
                q.max_bytes.unwrap_or(0)
            ));
        }
        None
    }
}

fn is_write(stmt: &KvStatement) -> bool {
    matches!(stmt, KvStatement::Put(_) | KvStatement::Incr(_))
}

pub async fn execute(
    conn: &mut Calls<'_>,
    stmt: &KvStatement,
    params: &Params<'_>,
    state: &KvState,
    max_value: usize,
    tenant: Uuid,
) -> Result<Vec<Vec<Cell>>, ExecError> {
    if state.paused() {
        return Err(SqlError::error(
            SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
            "the KV surface is paused by the operator",
        )
        .into());
    }
    if is_write(stmt) {
        if let Some(why) = state.over_quota(tenant) {
            return Err(SqlError::error(SqlState::PROGRAM_LIMIT_EXCEEDED, why).into());
        }
    }
    let call = apply(stmt, params, max_value, tenant)?;
    let rows = conn.run(&call).await?;
    state.note_write(tenant, call.write_bytes);
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let ns = Cell::opt_text(r.namespace);
        let key = Cell::opt_text(r.key);
        let value = r.value.map(|v| v.0);
        let version = r.version.map_or(Cell::Null, Cell::Int8);
        out.push(match stmt {
            KvStatement::Get(_) | KvStatement::List(_) => {
                vec![
                    ns,
                    key,
                    value.map_or(Cell::Null, Cell::Jsonb),
                    version,
                    Cell::timestamp(r.expires_at),
                ]
            }
            KvStatement::Put(_) => vec![ns, key, Cell::Bool(r.applied.unwrap_or(false)), version],
            KvStatement::Incr(_) => {
                let n = value
                    .as_deref()
                    .and_then(|v| v.trim().parse::<i64>().ok())
                    .map_or(Cell::Null, Cell::Int8);
                vec![ns, key, n, version]
            }
            KvStatement::Delete(_) => vec![ns, key, Cell::Bool(r.applied.unwrap_or(false))],
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pause_and_quota_refuse_before_any_sql() {
        let state = KvState::default();
        let tenant = Uuid::from_u128(1);
        state.set_quotas(HashMap::from([(
            tenant,
            Quota {
                max_bytes: Some(10),
                used_bytes: 4,
                ..Quota::default()
            },
        )]));
        assert!(state.over_quota(tenant).is_none());
        state.note_write(tenant, 6);
        assert!(state.over_quota(tenant).is_some());
        state.set_paused(true);
        assert!(state.paused());
    }
}
