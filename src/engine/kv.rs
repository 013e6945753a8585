//! The KV statements: each one call of `queen.kv_apply_v1`, which applies a
//! batch of operations at one instant and takes rows in ascending
//! (namespace, key) byte order. The proxy only checks values and builds the
//! batch; every rule of the store (existence, versions, preconditions)
//! lives in the procedure, in one place.

use super::values::{json_string, Cell, Params};
use super::ExecError;
use crate::backend::conn::{Internal, RawRow};
use crate::backend::BackendConn;
use crate::protocol::ErrorFields;
use crate::rewrite::dialect::kv::{Expiry, KvStatement, Precondition};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use tokio_postgres::types::Type;
use uuid::Uuid;

const APPLY_CALL: Internal = Internal {
    name: "qw_kv_apply_v1",
    sql: "SELECT op_index, namespace, key, applied, value, version, expires_at FROM queen.kv_apply_v1($1::jsonb, $2)",
    param_types: &[Type::TEXT, Type::UUID],
};

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

fn ttl_ms(d: std::time::Duration) -> i64 {
    d.as_millis().clamp(1, i64::MAX as u128) as i64
}

fn expiry_json(expiry: &Expiry, params: &Params<'_>) -> Result<String, ErrorFields> {
    Ok(match expiry {
        Expiry::Forever => "null".to_string(),
        Expiry::Ttl(d) => ttl_ms(params.duration(d, "TTL")?).to_string(),
    })
}

/// The operations of one statement, as the JSON array kv_apply_v1 takes,
/// and the bytes it may write (for the soft quota).
fn operations(
    stmt: &KvStatement,
    params: &Params<'_>,
    max_value: usize,
) -> Result<(String, i64), ErrorFields> {
    let mut ops = Vec::new();
    let mut bytes = 0i64;
    match stmt {
        KvStatement::Get(get) => {
            let ns = params.namespace(&get.namespace)?;
            for key in &get.keys {
                let key = params.kv_key(key)?;
                ops.push(format!(
                    r#"{{"op":"get","ns":{},"key":{}}}"#,
                    json_string(&ns),
                    json_string(&key)
                ));
            }
        }
        KvStatement::Put(put) => {
            let ns = params.namespace(&put.namespace)?;
            let key = params.kv_key(&put.key)?;
            let value = params.json(&put.value, "value", max_value)?;
            bytes += (key.len() + value.len()) as i64;
            let (expect, if_absent) = match &put.precondition {
                None => ("null".to_string(), false),
                Some(Precondition::Absent) => ("null".to_string(), true),
                Some(Precondition::Version(v)) => (params.integer(v, "EXPECT")?.to_string(), false),
            };
            ops.push(format!(
                r#"{{"op":"put","ns":{},"key":{},"value":{},"ttl_ms":{},"expect":{},"if_absent":{}}}"#,
                json_string(&ns),
                json_string(&key),
                value,
                expiry_json(&put.expiry, params)?,
                expect,
                if_absent
            ));
        }
        KvStatement::Incr(incr) => {
            let ns = params.namespace(&incr.namespace)?;
            let key = params.kv_key(&incr.key)?;
            let by = params.integer(&incr.by, "BY")?;
            bytes += key.len() as i64 + 8;
            let expiry = match &incr.expiry {
                None => r#""keep""#.to_string(),
                Some(Expiry::Forever) => r#""forever""#.to_string(),
                Some(e) => expiry_json(e, params)?,
            };
            ops.push(format!(
                r#"{{"op":"incr","ns":{},"key":{},"by":{},"expiry":{}}}"#,
                json_string(&ns),
                json_string(&key),
                by,
                expiry
            ));
        }
        KvStatement::Delete(del) => {
            let ns = params.namespace(&del.namespace)?;
            let key = params.kv_key(&del.key)?;
            let expect = match &del.expect {
                None => "null".to_string(),
                Some(v) => params.integer(v, "EXPECT")?.to_string(),
            };
            ops.push(format!(
                r#"{{"op":"delete","ns":{},"key":{},"expect":{}}}"#,
                json_string(&ns),
                json_string(&key),
                expect
            ));
        }
        KvStatement::List(list) => {
            let ns = params.namespace(&list.namespace)?;
            let bound = |v: &Option<crate::rewrite::dialect::Value<String>>,
                         what: &str|
             -> Result<String, ErrorFields> {
                match v {
                    None => Ok("null".to_string()),
                    Some(v) => {
                        let s = params.text(v, what)?;
                        crate::rewrite::dialect::validate_kv_bound(what, &s)
                            .map_err(|e| super::values::parse_error(e).with_position(None))?;
                        Ok(json_string(&s))
                    }
                }
            };
            ops.push(format!(
                r#"{{"op":"list","ns":{},"prefix":{},"after":{},"limit":{}}}"#,
                json_string(&ns),
                bound(&list.prefix, "PREFIX")?,
                bound(&list.after, "AFTER")?,
                params.count(&list.limit, "LIMIT")?
            ));
        }
    }
    Ok((format!("[{}]", ops.join(",")), bytes))
}

fn is_write(stmt: &KvStatement) -> bool {
    matches!(stmt, KvStatement::Put(_) | KvStatement::Incr(_))
}

pub async fn execute(
    conn: &mut BackendConn,
    stmt: &KvStatement,
    params: &Params<'_>,
    state: &KvState,
    max_value: usize,
    tenant: Uuid,
) -> Result<Vec<Vec<Cell>>, ExecError> {
    if state.paused() {
        return Err(ExecError::Refused(ErrorFields::error(
            "55000",
            "the KV surface is paused by the operator",
        )));
    }
    if is_write(stmt) {
        if let Some(why) = state.over_quota(tenant) {
            return Err(ExecError::Refused(ErrorFields::error("54000", why)));
        }
    }
    let (ops, bytes) = operations(stmt, params, max_value)?;
    let rows = conn.call(&APPLY_CALL, &[&ops, &tenant]).await?;
    state.note_write(tenant, bytes);
    let get = |r: &RawRow, i: usize, ty: &Type| -> Result<Option<String>, ExecError> {
        r.get::<Option<String>>(i, ty).map_err(ExecError::from)
    };
    let mut out = Vec::with_capacity(rows.len());
    for r in &rows {
        let ns = Cell::opt_text(get(r, 1, &Type::TEXT)?);
        let key = Cell::opt_text(get(r, 2, &Type::TEXT)?);
        let applied: Option<bool> = r.get(3, &Type::BOOL)?;
        let value = r.jsonb(4)?;
        let version: Option<i64> = r.get(5, &Type::INT8)?;
        let expires: Option<std::time::SystemTime> = r.get(6, &Type::TIMESTAMPTZ)?;
        let version = version.map_or(Cell::Null, Cell::Int8);
        out.push(match stmt {
            KvStatement::Get(_) | KvStatement::List(_) => {
                vec![
                    ns,
                    key,
                    value.map_or(Cell::Null, Cell::Jsonb),
                    version,
                    Cell::timestamp(expires),
                ]
            }
            KvStatement::Put(_) => vec![ns, key, Cell::Bool(applied.unwrap_or(false)), version],
            KvStatement::Incr(_) => {
                let n = value
                    .as_deref()
                    .and_then(|v| v.trim().parse::<i64>().ok())
                    .map_or(Cell::Null, Cell::Int8);
                vec![ns, key, n, version]
            }
            KvStatement::Delete(_) => vec![ns, key, Cell::Bool(applied.unwrap_or(false))],
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rewrite::dialect::{self, Statement};

    fn ops_of(sql: &str) -> String {
        let Some(Ok(Statement::Kv(kv))) = dialect::parse(sql) else {
            panic!("{sql}");
        };
        operations(&kv, &Params(&[]), 1 << 20).unwrap().0
    }

    #[test]
    fn statements_become_one_batch() {
        assert_eq!(
            ops_of("KV GET sessions 'u:1', 'u\"2'"),
            r#"[{"op":"get","ns":"sessions","key":"u:1"},{"op":"get","ns":"sessions","key":"u\"2"}]"#
        );
        assert_eq!(
            ops_of("KV PUT s k 'null' TTL '2s' IF ABSENT"),
            r#"[{"op":"put","ns":"s","key":"k","value":null,"ttl_ms":2000,"expect":null,"if_absent":true}]"#
        );
        assert_eq!(
            ops_of("KV INCR c hits BY 5"),
            r#"[{"op":"incr","ns":"c","key":"hits","by":5,"expiry":"keep"}]"#
        );
        assert_eq!(
            ops_of("KV LIST s PREFIX 'a' LIMIT 3"),
            r#"[{"op":"list","ns":"s","prefix":"a","after":null,"limit":3}]"#
        );
    }

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
