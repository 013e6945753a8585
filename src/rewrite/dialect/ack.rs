//! `ACK receipt [, receipt ...] [FAILED [REASON 'text']]`
//! `RENEW receipt [, receipt ...] [FOR duration]`
//!
//! A receipt is the opaque text POP returned, written as a string literal
//! (or any name token) or `$n`. The parser does not look inside it: the
//! engine authenticates receipts and answers `22P02` for a bad one.

use std::time::Duration;

use super::cursor::{Cursor, Result};
use super::value::{ParamTypes, Value};
use super::{oid, Column};

pub type Receipt = Value<String>;

pub const ACK_COLUMNS: &[Column] = &[
    Column::new("receipt", oid::TEXT),
    Column::new("status", oid::TEXT),
];

pub const RENEW_COLUMNS: &[Column] = &[
    Column::new("receipt", oid::TEXT),
    Column::new("lease_expires_at", oid::TIMESTAMPTZ),
];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ack {
    /// At least one, at most 10,000.
    pub receipts: Vec<Receipt>,
    pub outcome: AckOutcome,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AckOutcome {
    /// Plain `ACK`: processed.
    Success,
    /// `ACK … FAILED [REASON 'text']`: retry or dead-letter.
    Failed { reason: Option<Value<String>> },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Renew {
    /// At least one, at most 10,000.
    pub receipts: Vec<Receipt>,
    /// `None`: the queue's `lease_time`.
    pub duration: Option<Value<Duration>>,
}

fn receipts(cursor: &mut Cursor<'_>) -> Result<Vec<Receipt>> {
    cursor.list("receipts", |cursor| {
        cursor.name_with("a receipt", |_| Ok(()))
    })
}

impl Ack {
    pub(crate) fn parse(cursor: &mut Cursor<'_>) -> Result<Ack> {
        cursor.expect_keyword("ACK")?;
        let receipts = receipts(cursor)?;
        let outcome = if cursor.eat_keyword("FAILED") {
            let reason = if cursor.eat_keyword("REASON") {
                Some(cursor.text_value("the failure reason as a string literal or parameter")?)
            } else {
                None
            };
            AckOutcome::Failed { reason }
        } else {
            AckOutcome::Success
        };
        Ok(Ack { receipts, outcome })
    }

    pub(crate) fn describe_params(&self, params: &mut ParamTypes) {
        params.note_all(&self.receipts, oid::TEXT);
        if let AckOutcome::Failed {
            reason: Some(reason),
        } = &self.outcome
        {
            params.note(reason, oid::TEXT);
        }
    }
}

impl Renew {
    pub(crate) fn parse(cursor: &mut Cursor<'_>) -> Result<Renew> {
        cursor.expect_keyword("RENEW")?;
        let receipts = receipts(cursor)?;
        let duration = if cursor.eat_keyword("FOR") {
            Some(cursor.duration("RENEW … FOR")?)
        } else {
            None
        };
        Ok(Renew { receipts, duration })
    }

    pub(crate) fn describe_params(&self, params: &mut ParamTypes) {
        params.note_all(&self.receipts, oid::TEXT);
        params.note_all(&self.duration, oid::TEXT);
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{error, lit};
    use super::super::{parse, Statement};
    use super::*;

    #[test]
    fn ack_one_or_many() {
        assert_eq!(
            parse("ACK 'r1'"),
            Some(Ok(Statement::Ack(Ack {
                receipts: vec![lit("r1")],
                outcome: AckOutcome::Success
            })))
        );
        assert_eq!(
            parse("ack 'r1', $1, 'r''3';"),
            Some(Ok(Statement::Ack(Ack {
                receipts: vec![lit("r1"), Value::Param(1), lit("r'3")],
                outcome: AckOutcome::Success
            })))
        );
    }

    #[test]
    fn ack_failed_with_and_without_reason() {
        assert_eq!(
            parse("ACK 'r1' FAILED"),
            Some(Ok(Statement::Ack(Ack {
                receipts: vec![lit("r1")],
                outcome: AckOutcome::Failed { reason: None }
            })))
        );
        assert_eq!(
            parse("ACK 'r1', 'r2' FAILED REASON 'timeout: upstream'"),
            Some(Ok(Statement::Ack(Ack {
                receipts: vec![lit("r1"), lit("r2")],
                outcome: AckOutcome::Failed {
                    reason: Some(lit("timeout: upstream"))
                }
            })))
        );
        let Some(Ok(statement)) = parse("ACK $1 FAILED REASON $2") else {
            panic!()
        };
        assert_eq!(statement.param_types(), vec![oid::TEXT, oid::TEXT]);
    }

    #[test]
    fn ack_errors() {
        assert_eq!(error("ACK"), ("42601", Some(4)));
        assert_eq!(error("ACK 'r1',"), ("42601", Some(10)));
        assert_eq!(error("ACK 'r1' FAILED REASON"), ("42601", Some(23)));
        assert_eq!(error("ACK 'r1' FAILED REASON timeout"), ("42601", Some(24)));
        assert_eq!(error("ACK 'r1' 'r2'"), ("42601", Some(10)));
        let many = vec!["'r'"; 10_001].join(",");
        assert_eq!(error(&format!("ACK {many}")).0, "54000");
    }

    #[test]
    fn renew() {
        assert_eq!(
            parse("RENEW 'r1', 'r2'"),
            Some(Ok(Statement::Renew(Renew {
                receipts: vec![lit("r1"), lit("r2")],
                duration: None
            })))
        );
        assert_eq!(
            parse("RENEW 'r1' FOR '00:01:30'"),
            Some(Ok(Statement::Renew(Renew {
                receipts: vec![lit("r1")],
                duration: Some(Value::Literal(Duration::from_secs(90)))
            })))
        );
        assert_eq!(
            parse("RENEW $1 FOR $2").map(|s| s.map(|s| s.param_types())),
            Some(Ok(vec![oid::TEXT, oid::TEXT]))
        );
        assert_eq!(error("RENEW 'r1' FOR"), ("42601", Some(15)));
        assert_eq!(error("RENEW 'r1' FOR 'a while'"), ("22P02", Some(16)));
    }
}
