//! The KV statements as the JSON array of operations `queen.kv_apply_v1`
//! takes (`crate::calls::kv`).

use crate::calls::kv::KvApply;
use crate::json::{array, JsonValue, Object};
use crate::protocol::SqlError;
use crate::rewrite::bind::{parse_error, Params};
use crate::rewrite::dialect::kv::{Expiry, KvStatement, Precondition};
use crate::rewrite::dialect::{validate_kv_bound, Value};
use uuid::Uuid;

fn ttl_ms(d: std::time::Duration) -> i64 {
    d.as_millis().clamp(1, i64::MAX as u128) as i64
}

/// A statement's batch. `max_value`: the largest value accepted, in bytes.
pub fn apply(
    stmt: &KvStatement,
    params: &Params<'_>,
    max_value: usize,
    tenant: Uuid,
) -> Result<KvApply, SqlError> {
    let mut ops = Vec::new();
    let mut bytes = 0i64;
    match stmt {
        KvStatement::Get(get) => {
            let ns = params.namespace(&get.namespace)?;
            for key in &get.keys {
                let key = params.kv_key(key)?;
                ops.push(
                    Object::new()
                        .member("op", JsonValue::Str("get"))
                        .member("ns", JsonValue::Str(&ns))
                        .member("key", JsonValue::Str(&key))
                        .finish(),
                );
            }
        }
        KvStatement::Put(put) => {
            let ns = params.namespace(&put.namespace)?;
            let key = params.kv_key(&put.key)?;
            let value = params.json(&put.value, "value", max_value)?;
            bytes += (key.len() + value.len()) as i64;
            let (expect, if_absent) = match &put.precondition {
                None => (None, false),
                Some(Precondition::Absent) => (None, true),
                Some(Precondition::Version(v)) => (Some(params.integer(v, "EXPECT")?), false),
            };
            let ttl = match &put.expiry {
                Expiry::Forever => None,
                Expiry::Ttl(d) => Some(ttl_ms(params.duration(d, "TTL")?)),
            };
            ops.push(
                Object::new()
                    .member("op", JsonValue::Str("put"))
                    .member("ns", JsonValue::Str(&ns))
                    .member("key", JsonValue::Str(&key))
                    .member("value", JsonValue::Raw(&value))
                    .member("ttl_ms", ttl.into())
                    .member("expect", expect.into())
                    .member("if_absent", JsonValue::Bool(if_absent))
                    .finish(),
            );
        }
        KvStatement::Incr(incr) => {
            let ns = params.namespace(&incr.namespace)?;
            let key = params.kv_key(&incr.key)?;
            let by = params.integer(&incr.by, "BY")?;
            bytes += key.len() as i64 + 8;
            let expiry = match &incr.expiry {
                None => JsonValue::Str("keep"),
                Some(Expiry::Forever) => JsonValue::Str("forever"),
                Some(Expiry::Ttl(d)) => JsonValue::Int(ttl_ms(params.duration(d, "TTL")?)),
            };
            ops.push(
                Object::new()
                    .member("op", JsonValue::Str("incr"))
                    .member("ns", JsonValue::Str(&ns))
                    .member("key", JsonValue::Str(&key))
                    .member("by", JsonValue::Int(by))
                    .member("expiry", expiry)
                    .finish(),
            );
        }
        KvStatement::Delete(del) => {
            let ns = params.namespace(&del.namespace)?;
            let key = params.kv_key(&del.key)?;
            let expect = del
                .expect
                .as_ref()
                .map(|v| params.integer(v, "EXPECT"))
                .transpose()?;
            ops.push(
                Object::new()
                    .member("op", JsonValue::Str("delete"))
                    .member("ns", JsonValue::Str(&ns))
                    .member("key", JsonValue::Str(&key))
                    .member("expect", expect.into())
                    .finish(),
            );
        }
        KvStatement::List(list) => {
            let ns = params.namespace(&list.namespace)?;
            let bound =
                |v: &Option<Value<String>>, what: &str| -> Result<Option<String>, SqlError> {
                    v.as_ref()
                        .map(|v| {
                            let s = params.text(v, what)?;
                            validate_kv_bound(what, &s)
                                .map_err(|e| parse_error(e).with_position(None))?;
                            Ok(s)
                        })
                        .transpose()
                };
            let prefix = bound(&list.prefix, "PREFIX")?;
            let after = bound(&list.after, "AFTER")?;
            let limit = params.count(&list.limit, "LIMIT")?;
            ops.push(
                Object::new()
                    .member("op", JsonValue::Str("list"))
                    .member("ns", JsonValue::Str(&ns))
                    .member("prefix", prefix.as_deref().into())
                    .member("after", after.as_deref().into())
                    .member("limit", JsonValue::Uint(limit.into()))
                    .finish(),
            );
        }
    }
    Ok(KvApply {
        ops: array(ops),
        write_bytes: bytes,
        tenant,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rewrite::dialect::{self, Statement};

    fn ops_of(sql: &str) -> String {
        let Some(Ok(Statement::Kv(kv))) = dialect::parse(sql) else {
            panic!("{sql}");
        };
        apply(&kv, &Params(&[]), 1 << 20, Uuid::nil()).unwrap().ops
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
        assert_eq!(
            ops_of("KV DELETE s k"),
            r#"[{"op":"delete","ns":"s","key":"k","expect":null}]"#
        );
    }

    #[test]
    fn a_put_counts_its_bytes_and_checks_its_value() {
        let Some(Ok(Statement::Kv(kv))) = dialect::parse("KV PUT s $1 $2 FOREVER") else {
            panic!("parse");
        };
        let params = [Some("key".to_string()), Some("[1,2]".to_string())];
        let call = apply(&kv, &Params(&params), 1 << 20, Uuid::nil()).unwrap();
        assert_eq!(call.write_bytes, 8);
        let bad = [Some("key".to_string()), Some("{".to_string())];
        assert_eq!(
            apply(&kv, &Params(&bad), 1 << 20, Uuid::nil())
                .unwrap_err()
                .code(),
            "22P02"
        );
    }
}
