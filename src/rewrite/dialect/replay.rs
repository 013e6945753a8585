//! `REPLAY DLQ FROM queue [PARTITION p] [GROUP g] [WHERE REASON LIKE 'pattern']
//! [LIMIT n]`: dead-lettered messages moved back into their queue, as new
//! messages, in one transaction with their removal from the DLQ.
//! Clauses may come in any order, each at most once. `REPLAY` is no
//! PostgreSQL statement.

use super::cursor::{Cursor, Result};
use super::value::{Name, ParamTypes, Value};
use super::{oid, Column};

/// One row per dead-lettered message taken out of the DLQ, by partition and
/// original offset.
pub const COLUMNS: &[Column] = &[
    Column::new("message_id", oid::UUID),
    Column::new("original_message_id", oid::UUID),
    Column::new("partition", oid::TEXT),
    Column::new("offset", oid::INT8),
    Column::new("group", oid::TEXT),
    Column::new("status", oid::TEXT),
];

/// `REPLAY DLQ` without `LIMIT` (the same default as `SHOW DLQ`).
pub const DEFAULT_LIMIT: u32 = 100;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayDlq {
    pub queue: Name,
    pub partition: Option<Name>,
    pub group: Option<Name>,
    /// A `LIKE` pattern on the reason, as PostgreSQL's `LIKE` reads it.
    pub reason_like: Option<Value<String>>,
    pub limit: Value<u32>,
}

impl ReplayDlq {
    pub(crate) fn describe_params(&self, params: &mut ParamTypes) {
        params.note(&self.queue, oid::TEXT);
        params.note_all(&self.partition, oid::TEXT);
        params.note_all(&self.group, oid::TEXT);
        params.note_all(&self.reason_like, oid::TEXT);
        params.note(&self.limit, oid::INT4);
    }

    pub(crate) fn parse(cursor: &mut Cursor<'_>) -> Result<ReplayDlq> {
        cursor.expect_keyword("REPLAY")?;
        cursor.expect_keyword("DLQ")?;
        cursor.expect_keyword("FROM")?;
        let queue = cursor.name("queue")?;
        let mut partition = None;
        let mut group = None;
        let mut reason_like = None;
        let mut limit = None;
        loop {
            let clause = cursor.peek().clone();
            if cursor.eat_keyword("PARTITION") {
                cursor.once(partition.is_some(), &clause, "PARTITION")?;
                partition = Some(cursor.name("partition")?);
            } else if cursor.eat_keyword("GROUP") {
                cursor.once(group.is_some(), &clause, "GROUP")?;
                group = Some(cursor.name("group")?);
            } else if cursor.eat_keyword("WHERE") {
                cursor.once(reason_like.is_some(), &clause, "WHERE")?;
                cursor.expect_keyword("REASON")?;
                cursor.expect_keyword("LIKE")?;
                reason_like = Some(cursor.text_value("a LIKE pattern as a string literal")?);
            } else if cursor.eat_keyword("LIMIT") {
                cursor.once(limit.is_some(), &clause, "LIMIT")?;
                limit = Some(cursor.count("LIMIT")?);
            } else {
                break;
            }
        }
        Ok(ReplayDlq {
            queue,
            partition,
            group,
            reason_like,
            limit: limit.unwrap_or(Value::Literal(DEFAULT_LIMIT)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{error, lit, ok};
    use super::super::Statement;
    use super::*;

    #[test]
    fn replay_dlq_takes_its_filters_in_any_order() {
        let statement =
            ok("REPLAY DLQ FROM jobs LIMIT 5 WHERE reason LIKE 'timeout%' GROUP g PARTITION p;");
        assert_eq!(
            statement,
            Statement::ReplayDlq(ReplayDlq {
                queue: lit("jobs"),
                partition: Some(lit("p")),
                group: Some(lit("g")),
                reason_like: Some(lit("timeout%")),
                limit: Value::Literal(5),
            })
        );
        assert_eq!(statement.columns(), COLUMNS);
        assert_eq!(statement.command_tag(2), "SELECT 2");
        let Statement::ReplayDlq(r) = ok("replay dlq from q") else {
            panic!()
        };
        assert_eq!(r.limit, Value::Literal(DEFAULT_LIMIT));
    }

    #[test]
    fn replay_dlq_rejects_what_it_does_not_know() {
        assert_eq!(error("REPLAY DLQ q").0, "42601");
        assert_eq!(error("REPLAY DLQ FROM q WHERE group = 'x'").0, "42601");
        assert_eq!(error("REPLAY DLQ FROM q WHERE reason LIKE x").0, "42601");
        assert_eq!(error("REPLAY DLQ FROM q LIMIT 0").0, "22023");
        assert_eq!(error("REPLAY DLQ FROM q LIMIT 1 LIMIT 1").0, "42601");
        assert_eq!(
            ok("REPLAY DLQ FROM $1 GROUP $2 WHERE REASON LIKE $3 LIMIT $4").param_types(),
            vec![oid::TEXT, oid::TEXT, oid::TEXT, oid::INT4]
        );
    }
}
