//! Browsing without leasing: `SHOW MESSAGES FROM queue [PARTITION p]
//! [GROUP g] [FROM OFFSET n | FROM 'timestamp'] [LIMIT k]`,
//! `SHOW MESSAGE 'message-id' FROM queue [GROUP g]` and
//! `SHOW TRACE 'trace-id'` (every message of a trace, across queues).
//!
//! Neither is PostgreSQL: its `SHOW` takes one configuration name, so a
//! second word after `SHOW MESSAGES` is a syntax error there.
//! Clauses may come in any order, each at most once.

use super::cursor::{Cursor, Result};
use super::value::{Name, ParamTypes, Timestamp, Value};
use super::{oid, Column, ParseError};
use crate::protocol::SqlState;

/// One row per message, by partition name then offset. `state` is the
/// message's state for the group (`__QUEUE_MODE__` without `GROUP`):
/// `consumed`, `leased`, `pending` or `dead_lettered`.
pub const COLUMNS: &[Column] = &[
    Column::new("partition", oid::TEXT),
    Column::new("offset", oid::INT8),
    Column::new("message_id", oid::UUID),
    Column::new("created_at", oid::TIMESTAMPTZ),
    Column::new("transaction_id", oid::TEXT),
    Column::new("trace_id", oid::TEXT),
    Column::new("payload", oid::JSONB),
    Column::new("state", oid::TEXT),
];

/// `SHOW TRACE`: one row per (message, group of its queue); `group` is
/// NULL for a queue no group has popped. `state` is `pushed`, `leased`,
/// `acked` or `dead_lettered`.
pub const TRACE_COLUMNS: &[Column] = &[
    Column::new("queue", oid::TEXT),
    Column::new("partition", oid::TEXT),
    Column::new("offset", oid::INT8),
    Column::new("message_id", oid::UUID),
    Column::new("created_at", oid::TIMESTAMPTZ),
    Column::new("group", oid::TEXT),
    Column::new("state", oid::TEXT),
    Column::new("transaction_id", oid::TEXT),
    Column::new("payload", oid::JSONB),
];

/// `SHOW TRACE` reads at most this many messages of a trace.
pub const MAX_TRACE_MESSAGES: u32 = 1000;

/// `SHOW MESSAGES` without `LIMIT`.
pub const DEFAULT_LIMIT: u32 = 100;

/// Where a browse starts in every partition it reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BrowseFrom {
    /// The oldest retained message.
    Beginning,
    /// The first offset at or after `n` (`FROM OFFSET n`, n ≥ 0).
    Offset(Value<i64>),
    /// The first message created at or after the time (`FROM 'ts'`), read
    /// like a timestamptz literal.
    Time(Timestamp),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShowMessages {
    pub queue: Name,
    pub partition: Option<Name>,
    pub group: Option<Name>,
    pub from: BrowseFrom,
    /// [`DEFAULT_LIMIT`] when not written; at most 10,000 (`54000` above).
    pub limit: Value<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShowMessage {
    /// The message id (uuid text); a literal is checked here (`22P02`).
    pub message_id: Value<String>,
    pub queue: Name,
    pub group: Option<Name>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Browse {
    Messages(ShowMessages),
    Message(ShowMessage),
    /// The trace id, taken as written (1–255 bytes, as PUSH stores it).
    Trace(Value<String>),
}

impl Browse {
    pub fn columns(&self) -> &'static [Column] {
        match self {
            Browse::Messages(_) | Browse::Message(_) => COLUMNS,
            Browse::Trace(_) => TRACE_COLUMNS,
        }
    }

    pub(crate) fn describe_params(&self, params: &mut ParamTypes) {
        match self {
            Browse::Messages(m) => {
                params.note(&m.queue, oid::TEXT);
                params.note_all(&m.partition, oid::TEXT);
                params.note_all(&m.group, oid::TEXT);
                match &m.from {
                    BrowseFrom::Beginning => {}
                    BrowseFrom::Offset(n) => params.note(n, oid::INT8),
                    BrowseFrom::Time(t) => params.note(t, oid::TIMESTAMPTZ),
                }
                params.note(&m.limit, oid::INT4);
            }
            Browse::Message(m) => {
                params.note(&m.message_id, oid::TEXT);
                params.note(&m.queue, oid::TEXT);
                params.note_all(&m.group, oid::TEXT);
            }
            Browse::Trace(t) => params.note(t, oid::TEXT),
        }
    }

    /// After `SHOW`: `MESSAGES …`, `MESSAGE …` or `TRACE …`.
    pub(crate) fn parse(cursor: &mut Cursor<'_>) -> Result<Browse> {
        cursor.expect_keyword("SHOW")?;
        if cursor.eat_keyword("TRACE") {
            let token = cursor.peek().clone();
            let trace = cursor.text_value("a trace id as a string literal or parameter")?;
            if let Value::Literal(text) = &trace {
                check_trace_id(text).map_err(|e| e.at(cursor.position(&token)))?;
            }
            return Ok(Browse::Trace(trace));
        }
        if cursor.eat_keyword("MESSAGES") {
            return parse_messages(cursor).map(Browse::Messages);
        }
        cursor.expect_keyword("MESSAGE")?;
        let token = cursor.peek().clone();
        let message_id = cursor.text_value("a message id as a string literal or parameter")?;
        if let Value::Literal(text) = &message_id {
            check_message_id(text).map_err(|e| e.at(cursor.position(&token)))?;
        }
        cursor.expect_keyword("FROM")?;
        let queue = cursor.name("queue")?;
        let group = if cursor.eat_keyword("GROUP") {
            Some(cursor.name("group")?)
        } else {
            None
        };
        Ok(Browse::Message(ShowMessage {
            message_id,
            queue,
            group,
        }))
    }
}

/// A message id must be a uuid (`22P02` otherwise, as PostgreSQL's uuid input).
pub fn check_message_id(text: &str) -> std::result::Result<uuid::Uuid, ParseError> {
    uuid::Uuid::parse_str(text.trim()).map_err(|_| {
        ParseError::new(
            SqlState::INVALID_TEXT_REPRESENTATION,
            format!("invalid input syntax for type uuid: \"{text}\""),
        )
    })
}

/// A trace id is 1–255 bytes, as PUSH accepts it (`22023` otherwise).
pub fn check_trace_id(text: &str) -> std::result::Result<(), ParseError> {
    if text.is_empty() || text.len() > 255 {
        return Err(ParseError::new(
            SqlState::INVALID_PARAMETER_VALUE,
            format!("a trace id is 1 to 255 bytes, got {}", text.len()),
        ));
    }
    Ok(())
}

fn parse_messages(cursor: &mut Cursor<'_>) -> Result<ShowMessages> {
    cursor.expect_keyword("FROM")?;
    let queue = cursor.name("queue")?;
    let mut partition = None;
    let mut group = None;
    let mut from = None;
    let mut limit = None;
    loop {
        let clause = cursor.peek().clone();
        if cursor.eat_keyword("PARTITION") {
            cursor.once(partition.is_some(), &clause, "PARTITION")?;
            partition = Some(cursor.name("partition")?);
        } else if cursor.eat_keyword("GROUP") {
            cursor.once(group.is_some(), &clause, "GROUP")?;
            group = Some(cursor.name("group")?);
        } else if cursor.eat_keyword("FROM") {
            cursor.once(from.is_some(), &clause, "FROM")?;
            from = Some(if cursor.eat_keyword("OFFSET") {
                let token = cursor.peek().clone();
                let offset = cursor.integer("OFFSET")?;
                if let Value::Literal(n) = offset {
                    check_offset(n).map_err(|e| e.at(cursor.position(&token)))?;
                }
                BrowseFrom::Offset(offset)
            } else if cursor.eat_keyword("BEGINNING") {
                BrowseFrom::Beginning
            } else {
                cursor.eat_keyword("TIMESTAMP");
                BrowseFrom::Time(cursor.text_value("OFFSET n, BEGINNING or a timestamp string")?)
            });
        } else if cursor.eat_keyword("LIMIT") {
            cursor.once(limit.is_some(), &clause, "LIMIT")?;
            limit = Some(cursor.count("LIMIT")?);
        } else {
            break;
        }
    }
    Ok(ShowMessages {
        queue,
        partition,
        group,
        from: from.unwrap_or(BrowseFrom::Beginning),
        limit: limit.unwrap_or(Value::Literal(DEFAULT_LIMIT)),
    })
}

/// `FROM OFFSET n` needs n ≥ 0 (`22023`).
pub fn check_offset(n: i64) -> std::result::Result<i64, ParseError> {
    if n < 0 {
        return Err(ParseError::new(
            SqlState::INVALID_PARAMETER_VALUE,
            format!("OFFSET must be 0 or more, got {n}"),
        ));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{error, lit, ok};
    use super::super::Statement;
    use super::*;

    fn messages(sql: &str) -> ShowMessages {
        match ok(sql) {
            Statement::Browse(Browse::Messages(m)) => m,
            other => panic!("{sql}: {other:?}"),
        }
    }

    #[test]
    fn show_messages_defaults_to_the_beginning_and_a_hundred_rows() {
        let m = messages("SHOW MESSAGES FROM orders");
        assert_eq!(m.queue, lit("orders"));
        assert_eq!(m.from, BrowseFrom::Beginning);
        assert_eq!(m.limit, Value::Literal(DEFAULT_LIMIT));
        assert_eq!(m.group, None);
        assert_eq!(ok("show messages from q").columns(), COLUMNS);
    }

    #[test]
    fn show_messages_takes_its_clauses_in_any_order_once() {
        let m = messages("SHOW MESSAGES FROM q LIMIT 5 GROUP g PARTITION p FROM OFFSET 7;");
        assert_eq!(m.partition, Some(lit("p")));
        assert_eq!(m.group, Some(lit("g")));
        assert_eq!(m.from, BrowseFrom::Offset(Value::Literal(7)));
        assert_eq!(m.limit, Value::Literal(5));
        let m = messages("SHOW MESSAGES FROM q FROM '2026-01-01 00:00:00+00'");
        assert_eq!(m.from, BrowseFrom::Time(lit("2026-01-01 00:00:00+00")));
        let m = messages("SHOW MESSAGES FROM q FROM TIMESTAMP '2026-01-01'");
        assert_eq!(m.from, BrowseFrom::Time(lit("2026-01-01")));
        assert_eq!(
            error("SHOW MESSAGES FROM q LIMIT 1 LIMIT 2"),
            ("42601", Some(30))
        );
        assert_eq!(
            error("SHOW MESSAGES FROM q FROM OFFSET 1 FROM 'x'").0,
            "42601"
        );
    }

    #[test]
    fn show_messages_rejects_bad_offsets_and_limits() {
        assert_eq!(
            error("SHOW MESSAGES FROM q FROM OFFSET -1"),
            ("22023", Some(34))
        );
        assert_eq!(error("SHOW MESSAGES FROM q FROM OFFSET 'x'").0, "22P02");
        assert_eq!(error("SHOW MESSAGES FROM q LIMIT 0").0, "22023");
        assert_eq!(error("SHOW MESSAGES FROM q LIMIT 10001").0, "54000");
        assert_eq!(error("SHOW MESSAGES q").0, "42601");
        assert_eq!(error("SHOW MESSAGES FROM q WHERE x").0, "42601");
    }

    #[test]
    fn show_messages_describes_its_parameters() {
        let statement = ok("SHOW MESSAGES FROM $1 PARTITION $2 GROUP $3 FROM OFFSET $4 LIMIT $5");
        assert_eq!(
            statement.param_types(),
            vec![oid::TEXT, oid::TEXT, oid::TEXT, oid::INT8, oid::INT4]
        );
        let statement = ok("SHOW MESSAGES FROM q FROM $1");
        assert_eq!(statement.param_types(), vec![oid::TIMESTAMPTZ]);
    }

    #[test]
    fn show_trace_takes_a_trace_id() {
        let statement = ok("SHOW TRACE 'checkout-42'");
        assert_eq!(
            statement,
            Statement::Browse(Browse::Trace(lit("checkout-42")))
        );
        assert_eq!(statement.columns(), TRACE_COLUMNS);
        assert_eq!(ok("SHOW TRACE $1").param_types(), vec![oid::TEXT]);
        assert_eq!(error("SHOW TRACE ''"), ("22023", Some(12)));
        assert_eq!(error("SHOW TRACE x").0, "42601");
        assert_eq!(error("SHOW TRACE 'a' FROM q").0, "42601");
    }

    #[test]
    fn show_message_takes_a_uuid() {
        let id = "0190b2a4-7d1c-7000-8000-000000000001";
        let Statement::Browse(Browse::Message(m)) =
            ok(&format!("SHOW MESSAGE '{id}' FROM q GROUP g"))
        else {
            panic!()
        };
        assert_eq!(m.message_id, lit(id));
        assert_eq!(m.group, Some(lit("g")));
        assert_eq!(error("SHOW MESSAGE 'nope' FROM q"), ("22P02", Some(14)));
        assert_eq!(error("SHOW MESSAGE x FROM q").0, "42601");
        assert_eq!(
            ok("SHOW MESSAGE $1 FROM $2").param_types(),
            vec![oid::TEXT; 2]
        );
    }
}
