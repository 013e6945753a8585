//! The key/value store:
//! `KV GET ns key [, key ...]`,
//! `KV PUT ns key value (TTL duration | FOREVER) [EXPECT version | IF ABSENT]`,
//! `KV INCR ns key [BY n] [TTL duration | FOREVER]`,
//! `KV DELETE ns key [EXPECT version]`,
//! `KV LIST ns [PREFIX 'p'] [AFTER 'key'] [LIMIT n]`.
//!
//! Optional clauses may come in any order, each at most once.

use std::time::Duration;

use super::cursor::{Cursor, Result};
use super::error::{ParseError, SqlState};
use super::lexer::Token;
use super::value::{
    validate_kv_bound, validate_kv_key, validate_namespace, Json, Name, ParamTypes, Value,
};
use super::{oid, Column};

/// Rows of GET and LIST; an absent or expired key has no row.
pub const ENTRY_COLUMNS: &[Column] = &[
    Column::new("namespace", oid::TEXT),
    Column::new("key", oid::TEXT),
    Column::new("value", oid::JSONB),
    Column::new("version", oid::INT8),
    Column::new("expires_at", oid::TIMESTAMPTZ),
];

pub const PUT_COLUMNS: &[Column] = &[
    Column::new("namespace", oid::TEXT),
    Column::new("key", oid::TEXT),
    Column::new("applied", oid::BOOL),
    Column::new("version", oid::INT8),
];

pub const INCR_COLUMNS: &[Column] = &[
    Column::new("namespace", oid::TEXT),
    Column::new("key", oid::TEXT),
    Column::new("value", oid::INT8),
    Column::new("version", oid::INT8),
];

pub const DELETE_COLUMNS: &[Column] = &[
    Column::new("namespace", oid::TEXT),
    Column::new("key", oid::TEXT),
    Column::new("applied", oid::BOOL),
];

pub const DEFAULT_LIST_LIMIT: u32 = 100;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvStatement {
    Get(KvGet),
    Put(KvPut),
    Incr(KvIncr),
    Delete(KvDelete),
    List(KvList),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvGet {
    pub namespace: Name,
    /// At least one, at most 10,000; read at one instant.
    pub keys: Vec<Name>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvPut {
    pub namespace: Name,
    pub key: Name,
    /// JSON text; a literal is valid JSON.
    pub value: Json,
    pub expiry: Expiry,
    /// `None`: unconditional.
    pub precondition: Option<Precondition>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expiry {
    Ttl(Value<Duration>),
    Forever,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Precondition {
    /// `EXPECT v`: the current version equals v; `EXPECT 0` (literal or
    /// bound) means the key must not exist, like `IF ABSENT`.
    Version(Value<i64>),
    /// `IF ABSENT`.
    Absent,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvIncr {
    pub namespace: Name,
    pub key: Name,
    /// 1 when not written.
    pub by: Value<i64>,
    /// `None`: keep an existing key's expiry; creating a key then needs one
    /// (the engine's check, as only it knows whether the key exists).
    pub expiry: Option<Expiry>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvDelete {
    pub namespace: Name,
    pub key: Name,
    pub expect: Option<Value<i64>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvList {
    pub namespace: Name,
    /// Keys starting with this; may be empty.
    pub prefix: Option<Value<String>>,
    /// Keyset cursor: keys strictly after this one in byte order.
    pub after: Option<Value<String>>,
    /// 100 when not written; at most 10,000.
    pub limit: Value<u32>,
}

fn namespace(cursor: &mut Cursor<'_>) -> Result<Name> {
    cursor.name_with("a KV namespace", validate_namespace)
}

fn key(cursor: &mut Cursor<'_>) -> Result<Name> {
    cursor.name_with("a KV key", validate_kv_key)
}

/// `TTL duration` or `FOREVER`, if one is next.
fn expiry(cursor: &mut Cursor<'_>) -> Result<Option<Expiry>> {
    if cursor.eat_keyword("TTL") {
        Ok(Some(Expiry::Ttl(cursor.duration("TTL")?)))
    } else if cursor.eat_keyword("FOREVER") {
        Ok(Some(Expiry::Forever))
    } else {
        Ok(None)
    }
}

/// Rejects a second expiry clause (`TTL 5 FOREVER`) at the second one.
fn expiry_once(cursor: &mut Cursor<'_>, current: &Option<Expiry>) -> Result<Option<Expiry>> {
    let clause = cursor.peek().clone();
    let parsed = expiry(cursor)?;
    cursor.once(
        parsed.is_some() && current.is_some(),
        &clause,
        "TTL or FOREVER",
    )?;
    Ok(parsed)
}

impl KvStatement {
    pub(crate) fn parse(cursor: &mut Cursor<'_>) -> Result<KvStatement> {
        cursor.expect_keyword("KV")?;
        if cursor.eat_keyword("GET") {
            let namespace = namespace(cursor)?;
            let keys = cursor.list("keys", key)?;
            return Ok(KvStatement::Get(KvGet { namespace, keys }));
        }
        if cursor.eat_keyword("PUT") {
            return parse_put(cursor).map(KvStatement::Put);
        }
        if cursor.eat_keyword("INCR") {
            return parse_incr(cursor).map(KvStatement::Incr);
        }
        if cursor.eat_keyword("DELETE") {
            let namespace = namespace(cursor)?;
            let key = key(cursor)?;
            let expect = if cursor.eat_keyword("EXPECT") {
                Some(cursor.integer("EXPECT")?)
            } else {
                None
            };
            return Ok(KvStatement::Delete(KvDelete {
                namespace,
                key,
                expect,
            }));
        }
        if cursor.eat_keyword("LIST") {
            return parse_list(cursor).map(KvStatement::List);
        }
        Err(cursor.unexpected("GET, PUT, INCR, DELETE or LIST"))
    }

    pub fn columns(&self) -> &'static [Column] {
        match self {
            KvStatement::Get(_) | KvStatement::List(_) => ENTRY_COLUMNS,
            KvStatement::Put(_) => PUT_COLUMNS,
            KvStatement::Incr(_) => INCR_COLUMNS,
            KvStatement::Delete(_) => DELETE_COLUMNS,
        }
    }

    pub(crate) fn describe_params(&self, params: &mut ParamTypes) {
        let note_expiry = |params: &mut ParamTypes, expiry: Option<&Expiry>| {
            if let Some(Expiry::Ttl(ttl)) = expiry {
                params.note(ttl, oid::TEXT);
            }
        };
        match self {
            KvStatement::Get(get) => {
                params.note(&get.namespace, oid::TEXT);
                params.note_all(&get.keys, oid::TEXT);
            }
            KvStatement::Put(put) => {
                params.note(&put.namespace, oid::TEXT);
                params.note(&put.key, oid::TEXT);
                params.note(&put.value, oid::JSONB);
                note_expiry(params, Some(&put.expiry));
                if let Some(Precondition::Version(version)) = &put.precondition {
                    params.note(version, oid::INT8);
                }
            }
            KvStatement::Incr(incr) => {
                params.note(&incr.namespace, oid::TEXT);
                params.note(&incr.key, oid::TEXT);
                params.note(&incr.by, oid::INT8);
                note_expiry(params, incr.expiry.as_ref());
            }
            KvStatement::Delete(delete) => {
                params.note(&delete.namespace, oid::TEXT);
                params.note(&delete.key, oid::TEXT);
                params.note_all(&delete.expect, oid::INT8);
            }
            KvStatement::List(list) => {
                params.note(&list.namespace, oid::TEXT);
                params.note_all(&list.prefix, oid::TEXT);
                params.note_all(&list.after, oid::TEXT);
                params.note(&list.limit, oid::INT4);
            }
        }
    }
}

fn parse_put(cursor: &mut Cursor<'_>) -> Result<KvPut> {
    let namespace = namespace(cursor)?;
    let key = key(cursor)?;
    let value = cursor.json("the KV value")?;
    let mut expiry = None;
    let mut precondition = None;
    while !cursor.at_end() {
        let clause = cursor.peek().clone();
        if let Some(parsed) = expiry_once(cursor, &expiry)? {
            expiry = Some(parsed);
        } else if cursor.eat_keyword("EXPECT") {
            cursor.once(precondition.is_some(), &clause, "EXPECT or IF ABSENT")?;
            precondition = Some(Precondition::Version(cursor.integer("EXPECT")?));
        } else if cursor.eat_keyword("IF") {
            cursor.once(precondition.is_some(), &clause, "EXPECT or IF ABSENT")?;
            cursor.expect_keyword("ABSENT")?;
            precondition = Some(Precondition::Absent);
        } else {
            return Err(
                cursor.unexpected("TTL, FOREVER, EXPECT, IF ABSENT or the end of the statement")
            );
        }
    }
    let Some(expiry) = expiry else {
        return Err(ParseError::new(
            SqlState::INVALID_PARAMETER_VALUE,
            "KV PUT needs TTL duration or FOREVER: no key is kept forever unless it says so",
        )
        .at(cursor.position(cursor.peek())));
    };
    Ok(KvPut {
        namespace,
        key,
        value,
        expiry,
        precondition,
    })
}

fn parse_incr(cursor: &mut Cursor<'_>) -> Result<KvIncr> {
    let namespace = namespace(cursor)?;
    let key = key(cursor)?;
    let mut by = None;
    let mut expiry = None;
    while !cursor.at_end() {
        let clause = cursor.peek().clone();
        if let Some(parsed) = expiry_once(cursor, &expiry)? {
            expiry = Some(parsed);
        } else if cursor.eat_keyword("BY") {
            cursor.once(by.is_some(), &clause, "BY")?;
            by = Some(cursor.integer("BY")?);
        } else {
            return Err(cursor.unexpected("BY, TTL, FOREVER or the end of the statement"));
        }
    }
    Ok(KvIncr {
        namespace,
        key,
        by: by.unwrap_or(Value::Literal(1)),
        expiry,
    })
}

fn list_bound(
    cursor: &mut Cursor<'_>,
    clause: &Token<'_>,
    what: &'static str,
    slot: &Option<Value<String>>,
) -> Result<Value<String>> {
    cursor.once(slot.is_some(), clause, what)?;
    cursor.name_with(&format!("a {what} string or parameter"), |text| {
        validate_kv_bound(what, text)
    })
}

fn parse_list(cursor: &mut Cursor<'_>) -> Result<KvList> {
    let namespace = namespace(cursor)?;
    let mut prefix = None;
    let mut after = None;
    let mut limit = None;
    while !cursor.at_end() {
        let clause = cursor.peek().clone();
        if cursor.eat_keyword("PREFIX") {
            prefix = Some(list_bound(cursor, &clause, "PREFIX", &prefix)?);
        } else if cursor.eat_keyword("AFTER") {
            after = Some(list_bound(cursor, &clause, "AFTER", &after)?);
        } else if cursor.eat_keyword("LIMIT") {
            cursor.once(limit.is_some(), &clause, "LIMIT")?;
            limit = Some(cursor.count("LIMIT")?);
        } else {
            return Err(cursor.unexpected("PREFIX, AFTER, LIMIT or the end of the statement"));
        }
    }
    Ok(KvList {
        namespace,
        prefix,
        after,
        limit: limit.unwrap_or(Value::Literal(DEFAULT_LIST_LIMIT)),
    })
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{error, lit};
    use super::super::{parse, Statement};
    use super::*;

    fn kv(sql: &str) -> KvStatement {
        match parse(sql) {
            Some(Ok(Statement::Kv(kv))) => kv,
            other => panic!("{sql}: {other:?}"),
        }
    }

    #[test]
    fn get_one_or_many_keys() {
        assert_eq!(
            kv("KV GET sessions user:1"),
            KvStatement::Get(KvGet {
                namespace: lit("sessions"),
                keys: vec![lit("user:1")]
            })
        );
        assert_eq!(
            kv("kv get app.v1 'a key', \"B\", $1"),
            KvStatement::Get(KvGet {
                namespace: lit("app.v1"),
                keys: vec![lit("a key"), lit("B"), Value::Param(1)]
            })
        );
        assert_eq!(kv("KV GET ns k").columns(), ENTRY_COLUMNS);
    }

    #[test]
    fn put_needs_ttl_or_forever() {
        assert_eq!(
            kv("KV PUT ns k '{\"a\":1}' TTL '5m'"),
            KvStatement::Put(KvPut {
                namespace: lit("ns"),
                key: lit("k"),
                value: lit("{\"a\":1}"),
                expiry: Expiry::Ttl(Value::Literal(Duration::from_secs(300))),
                precondition: None
            })
        );
        assert_eq!(
            kv("KV PUT ns k 'null' FOREVER IF ABSENT"),
            KvStatement::Put(KvPut {
                namespace: lit("ns"),
                key: lit("k"),
                value: lit("null"),
                expiry: Expiry::Forever,
                precondition: Some(Precondition::Absent)
            })
        );
        assert_eq!(
            kv("KV PUT ns k '1' EXPECT 0 TTL 60"),
            KvStatement::Put(KvPut {
                namespace: lit("ns"),
                key: lit("k"),
                value: lit("1"),
                expiry: Expiry::Ttl(Value::Literal(Duration::from_secs(60))),
                precondition: Some(Precondition::Version(Value::Literal(0)))
            })
        );
        assert_eq!(error("KV PUT ns k '1'"), ("22023", Some(16)));
        assert_eq!(error("KV PUT ns k '1' EXPECT 3"), ("22023", Some(25)));
    }

    #[test]
    fn put_errors() {
        assert_eq!(error("KV PUT ns k '{' FOREVER"), ("22P02", Some(13)));
        assert_eq!(error("KV PUT ns k 5 FOREVER"), ("42601", Some(13)));
        assert_eq!(error("KV PUT ns k '1' TTL 5 FOREVER"), ("42601", Some(23)));
        assert_eq!(
            error("KV PUT ns k '1' FOREVER EXPECT 1 IF ABSENT"),
            ("42601", Some(34))
        );
        assert_eq!(
            error("KV PUT ns k '1' FOREVER EXPECT x"),
            ("42601", Some(32))
        );
        assert_eq!(
            error("KV PUT ns k '1' FOREVER EXPECT 'x'"),
            ("22P02", Some(32))
        );
        assert_eq!(
            error("KV PUT ns k '1' FOREVER IF EXISTS"),
            ("42601", Some(28))
        );
    }

    #[test]
    fn put_parameters() {
        let Some(Ok(statement)) = parse("KV PUT $1 $2 $3 TTL $4 EXPECT $5") else {
            panic!()
        };
        assert_eq!(
            statement.param_types(),
            vec![oid::TEXT, oid::TEXT, oid::JSONB, oid::TEXT, oid::INT8]
        );
        assert_eq!(statement.columns(), PUT_COLUMNS);
    }

    #[test]
    fn incr() {
        assert_eq!(
            kv("KV INCR counters hits"),
            KvStatement::Incr(KvIncr {
                namespace: lit("counters"),
                key: lit("hits"),
                by: Value::Literal(1),
                expiry: None
            })
        );
        assert_eq!(
            kv("KV INCR counters hits FOREVER BY -5"),
            KvStatement::Incr(KvIncr {
                namespace: lit("counters"),
                key: lit("hits"),
                by: Value::Literal(-5),
                expiry: Some(Expiry::Forever)
            })
        );
        let Some(Ok(statement)) = parse("KV INCR c k BY $1 TTL $2") else {
            panic!()
        };
        assert_eq!(statement.param_types(), vec![oid::INT8, oid::TEXT]);
        assert_eq!(statement.columns(), INCR_COLUMNS);
        assert_eq!(error("KV INCR c k BY 1 BY 2"), ("42601", Some(18)));
        assert_eq!(error("KV INCR c k BY 1.5"), ("22P02", Some(16)));
        assert_eq!(
            error("KV INCR c k BY 99999999999999999999"),
            ("22003", Some(16))
        );
    }

    #[test]
    fn delete() {
        assert_eq!(
            kv("KV DELETE ns k EXPECT $1"),
            KvStatement::Delete(KvDelete {
                namespace: lit("ns"),
                key: lit("k"),
                expect: Some(Value::Param(1))
            })
        );
        assert_eq!(kv("KV DELETE ns k").columns(), DELETE_COLUMNS);
        assert_eq!(error("KV DELETE ns"), ("42601", Some(13)));
    }

    #[test]
    fn list() {
        assert_eq!(
            kv("KV LIST ns"),
            KvStatement::List(KvList {
                namespace: lit("ns"),
                prefix: None,
                after: None,
                limit: Value::Literal(DEFAULT_LIST_LIMIT)
            })
        );
        assert_eq!(
            kv("KV LIST ns LIMIT 10 AFTER 'user:9' PREFIX ''"),
            KvStatement::List(KvList {
                namespace: lit("ns"),
                prefix: Some(lit("")),
                after: Some(lit("user:9")),
                limit: Value::Literal(10)
            })
        );
        let Some(Ok(statement)) = parse("KV LIST $1 PREFIX $2 AFTER $3 LIMIT $4") else {
            panic!()
        };
        assert_eq!(
            statement.param_types(),
            vec![oid::TEXT, oid::TEXT, oid::TEXT, oid::INT4]
        );
        assert_eq!(error("KV LIST ns LIMIT 10001"), ("54000", Some(18)));
        assert_eq!(
            error("KV LIST ns PREFIX 'a' PREFIX 'b'"),
            ("42601", Some(23))
        );
    }

    #[test]
    fn namespace_and_key_validation() {
        assert_eq!(error("KV GET 'a b' k"), ("22023", Some(8)));
        assert_eq!(error("KV GET \"é\" k"), ("22023", Some(8)));
        let long_ns = "n".repeat(129);
        assert_eq!(error(&format!("KV GET {long_ns} k")), ("22023", Some(8)));
        assert_eq!(error("KV GET ns ''"), ("22023", Some(11)));
        let long_key = "k".repeat(1025);
        assert_eq!(
            error(&format!("KV GET ns '{long_key}'")),
            ("22023", Some(11))
        );
    }

    #[test]
    fn unknown_verb() {
        assert_eq!(error("KV SET ns k '1' FOREVER"), ("42601", Some(4)));
        assert_eq!(error("KV"), ("42601", Some(3)));
    }
}
