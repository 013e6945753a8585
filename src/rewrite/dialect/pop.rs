//! `POP FROM queue [PARTITION part] [GROUP grp] [LIMIT n] [PARTITIONS n]
//! [WAIT duration] [LEASE duration] [AUTO ACK]
//! [SUBSCRIBE FROM (BEGINNING | NOW | 'timestamp')]`
//!
//! The clauses may come in any order, each at most once.

use std::time::Duration;

use super::cursor::{Cursor, Result};
use super::lexer::TokenKind;
use super::value::{Name, ParamTypes, Timestamp, Value};
use super::{oid, Column};

pub const COLUMNS: &[Column] = &[
    Column::new("receipt", oid::TEXT),
    Column::new("message_id", oid::UUID),
    Column::new("queue", oid::TEXT),
    Column::new("partition", oid::TEXT),
    Column::new("offset", oid::INT8),
    Column::new("payload", oid::JSONB),
    Column::new("transaction_id", oid::TEXT),
    Column::new("trace_id", oid::TEXT),
    Column::new("retry_count", oid::INT4),
    Column::new("created_at", oid::TIMESTAMPTZ),
    Column::new("lease_expires_at", oid::TIMESTAMPTZ),
];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pop {
    pub queue: Name,
    /// `None`: any partition of the queue.
    pub partition: Option<Name>,
    /// `None`: the queue's default group (queue mode).
    pub group: Option<Name>,
    /// Messages to return at most; 1 when not written.
    pub limit: Value<u32>,
    /// Partitions one POP may claim at most; 1 when not written.
    pub partitions: Value<u32>,
    /// `None`: do not wait.
    pub wait: Option<Value<Duration>>,
    /// `None`: the queue's `lease_time`.
    pub lease: Option<Value<Duration>>,
    pub auto_ack: bool,
    /// Applies only when the group is first seen; `None` means FROM BEGINNING.
    pub subscribe_from: Option<SubscribeFrom>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubscribeFrom {
    Beginning,
    Now,
    /// `'timestamp'`, `TIMESTAMP 'timestamp'` or `$n`.
    Timestamp(Timestamp),
}

const CLAUSES: &str =
    "PARTITION, GROUP, LIMIT, PARTITIONS, WAIT, LEASE, AUTO ACK, SUBSCRIBE FROM or the end of the statement";

impl Pop {
    pub(crate) fn parse(cursor: &mut Cursor<'_>) -> Result<Pop> {
        cursor.expect_keyword("POP")?;
        cursor.expect_keyword("FROM")?;
        let queue = cursor.name("queue")?;
        let mut partition = None;
        let mut group = None;
        let mut limit = None;
        let mut partitions = None;
        let mut wait = None;
        let mut lease = None;
        let mut auto_ack = false;
        let mut subscribe_from = None;
        while !cursor.at_end() {
            let clause = cursor.peek().clone();
            let TokenKind::Word(word) = clause.kind else {
                return Err(cursor.unexpected(CLAUSES));
            };
            match word.to_ascii_uppercase().as_str() {
                "PARTITION" => {
                    cursor.once(partition.is_some(), &clause, "PARTITION")?;
                    cursor.advance();
                    partition = Some(cursor.name("partition")?);
                }
                "GROUP" => {
                    cursor.once(group.is_some(), &clause, "GROUP")?;
                    cursor.advance();
                    group = Some(cursor.name("group")?);
                }
                "LIMIT" => {
                    cursor.once(limit.is_some(), &clause, "LIMIT")?;
                    cursor.advance();
                    limit = Some(cursor.count("LIMIT")?);
                }
                "PARTITIONS" => {
                    cursor.once(partitions.is_some(), &clause, "PARTITIONS")?;
                    cursor.advance();
                    partitions = Some(cursor.count("PARTITIONS")?);
                }
                "WAIT" => {
                    cursor.once(wait.is_some(), &clause, "WAIT")?;
                    cursor.advance();
                    wait = Some(cursor.duration("WAIT")?);
                }
                "LEASE" => {
                    cursor.once(lease.is_some(), &clause, "LEASE")?;
                    cursor.advance();
                    lease = Some(cursor.duration("LEASE")?);
                }
                "AUTO" => {
                    cursor.once(auto_ack, &clause, "AUTO ACK")?;
                    cursor.advance();
                    cursor.expect_keyword("ACK")?;
                    auto_ack = true;
                }
                "SUBSCRIBE" => {
                    cursor.once(subscribe_from.is_some(), &clause, "SUBSCRIBE FROM")?;
                    cursor.advance();
                    cursor.expect_keyword("FROM")?;
                    subscribe_from = Some(parse_subscribe_from(cursor)?);
                }
                _ => return Err(cursor.unexpected(CLAUSES)),
            }
        }
        Ok(Pop {
            queue,
            partition,
            group,
            limit: limit.unwrap_or(Value::Literal(1)),
            partitions: partitions.unwrap_or(Value::Literal(1)),
            wait,
            lease,
            auto_ack,
            subscribe_from,
        })
    }

    pub(crate) fn describe_params(&self, params: &mut ParamTypes) {
        params.note(&self.queue, oid::TEXT);
        params.note_all(&self.partition, oid::TEXT);
        params.note_all(&self.group, oid::TEXT);
        params.note(&self.limit, oid::INT4);
        params.note(&self.partitions, oid::INT4);
        params.note_all(&self.wait, oid::TEXT);
        params.note_all(&self.lease, oid::TEXT);
        if let Some(SubscribeFrom::Timestamp(timestamp)) = &self.subscribe_from {
            params.note(timestamp, oid::TIMESTAMPTZ);
        }
    }
}

pub(crate) fn parse_subscribe_from(cursor: &mut Cursor<'_>) -> Result<SubscribeFrom> {
    if cursor.eat_keyword("BEGINNING") {
        return Ok(SubscribeFrom::Beginning);
    }
    if cursor.eat_keyword("NOW") {
        return Ok(SubscribeFrom::Now);
    }
    cursor.eat_keyword("TIMESTAMP");
    cursor
        .text_value("BEGINNING, NOW or a timestamp string")
        .map(SubscribeFrom::Timestamp)
}

#[cfg(test)]
mod tests {
    use super::super::test_support::error;
    use super::super::{parse, Statement};
    use super::*;

    fn pop(sql: &str) -> Pop {
        match parse(sql) {
            Some(Ok(Statement::Pop(pop))) => pop,
            other => panic!("{sql}: {other:?}"),
        }
    }

    #[test]
    fn defaults() {
        let pop = pop("POP FROM orders");
        assert_eq!(pop.queue, Value::Literal("orders".to_string()));
        assert_eq!(pop.limit, Value::Literal(1));
        assert_eq!(pop.partitions, Value::Literal(1));
        assert_eq!(
            (
                pop.partition,
                pop.group,
                pop.wait,
                pop.lease,
                pop.auto_ack,
                pop.subscribe_from
            ),
            (None, None, None, None, false, None)
        );
    }

    #[test]
    fn every_clause_in_any_order() {
        let pop = pop(
            "pop from q subscribe from now auto ack lease '2m' wait 5 partitions 3 \
             limit 10 group \"Billing\" partition Default;",
        );
        assert_eq!(pop.partition, Some(Value::Literal("Default".to_string())));
        assert_eq!(pop.group, Some(Value::Literal("Billing".to_string())));
        assert_eq!(pop.limit, Value::Literal(10));
        assert_eq!(pop.partitions, Value::Literal(3));
        assert_eq!(pop.wait, Some(Value::Literal(Duration::from_secs(5))));
        assert_eq!(pop.lease, Some(Value::Literal(Duration::from_secs(120))));
        assert!(pop.auto_ack);
        assert_eq!(pop.subscribe_from, Some(SubscribeFrom::Now));
    }

    #[test]
    fn subscribe_from_forms() {
        assert_eq!(
            pop("POP FROM q SUBSCRIBE FROM BEGINNING").subscribe_from,
            Some(SubscribeFrom::Beginning)
        );
        assert_eq!(
            pop("POP FROM q SUBSCRIBE FROM '2024-01-01 00:00:00+00'").subscribe_from,
            Some(SubscribeFrom::Timestamp(Value::Literal(
                "2024-01-01 00:00:00+00".to_string()
            )))
        );
        assert_eq!(
            pop("POP FROM q SUBSCRIBE FROM TIMESTAMP $1").subscribe_from,
            Some(SubscribeFrom::Timestamp(Value::Param(1)))
        );
        assert_eq!(
            error("POP FROM q SUBSCRIBE FROM later"),
            ("42601", Some(27))
        );
    }

    #[test]
    fn parameters_and_their_types() {
        let sql = "POP FROM $1 GROUP $2 LIMIT $3 PARTITIONS $4 WAIT $5 LEASE $6 SUBSCRIBE FROM $7";
        let Some(Ok(statement)) = parse(sql) else {
            panic!()
        };
        assert_eq!(
            statement.param_types(),
            vec![
                oid::TEXT,
                oid::TEXT,
                oid::INT4,
                oid::INT4,
                oid::TEXT,
                oid::TEXT,
                oid::TIMESTAMPTZ
            ]
        );
    }

    #[test]
    fn durations_accept_intervals() {
        assert_eq!(
            pop("POP FROM q WAIT '1 minute 30 seconds'").wait,
            Some(Value::Literal(Duration::from_secs(90)))
        );
        assert_eq!(
            pop("POP FROM q WAIT 250ms").wait,
            Some(Value::Literal(Duration::from_millis(250)))
        );
        assert_eq!(error("POP FROM q WAIT 'soon'"), ("22P02", Some(17)));
        assert_eq!(error("POP FROM q WAIT -1"), ("22023", Some(17)));
        assert_eq!(error("POP FROM q WAIT soon"), ("42601", Some(17)));
    }

    #[test]
    fn limits() {
        assert_eq!(pop("POP FROM q LIMIT 10000").limit, Value::Literal(10_000));
        assert_eq!(pop("POP FROM q LIMIT '7'").limit, Value::Literal(7));
        assert_eq!(error("POP FROM q LIMIT 10001"), ("54000", Some(18)));
        assert_eq!(error("POP FROM q LIMIT 0"), ("22023", Some(18)));
        assert_eq!(error("POP FROM q PARTITIONS 0"), ("22023", Some(23)));
        assert_eq!(error("POP FROM q LIMIT 1.5"), ("22P02", Some(18)));
        assert_eq!(error("POP FROM q LIMIT WAIT 5"), ("42601", Some(18)));
    }

    #[test]
    fn a_clause_twice_is_a_syntax_error_at_the_second() {
        assert_eq!(
            error("POP FROM q LIMIT 1 WAIT 2 LIMIT 3"),
            ("42601", Some(27))
        );
        assert_eq!(error("POP FROM q AUTO ACK AUTO ACK"), ("42601", Some(21)));
        assert_eq!(error("POP FROM q GROUP a group b"), ("42601", Some(20)));
    }

    #[test]
    fn unknown_clause_or_junk() {
        assert_eq!(error("POP FROM q LIMT 5"), ("42601", Some(12)));
        assert_eq!(error("POP FROM q AUTO"), ("42601", Some(16)));
        assert_eq!(error("POP FROM q (1)"), ("42601", Some(12)));
        assert_eq!(error("POP q"), ("42601", Some(5)));
    }
}
