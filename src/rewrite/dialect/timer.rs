//! Timers:
//! `SCHEDULE INTO queue [PARTITION part] KEY k (AT 'timestamp' | AFTER duration) VALUES (payload)`,
//! `CANCEL SCHEDULE k ON queue`,
//! `SHOW SCHEDULES [ON queue]`.

use std::time::Duration;

use super::cursor::{Cursor, Result};
use super::lexer::TokenKind;
use super::show::optional_on_queue;
use super::value::{Json, Name, ParamTypes, Timestamp, Value};
use super::{oid, Column, Statement};

pub const SCHEDULE_COLUMNS: &[Column] = &[
    Column::new("queue", oid::TEXT),
    Column::new("key", oid::TEXT),
    Column::new("fire_at", oid::TIMESTAMPTZ),
];

pub const CANCEL_COLUMNS: &[Column] = &[
    Column::new("queue", oid::TEXT),
    Column::new("key", oid::TEXT),
    Column::new("applied", oid::BOOL),
];

pub const SHOW_COLUMNS: &[Column] = &[
    Column::new("queue", oid::TEXT),
    Column::new("key", oid::TEXT),
    Column::new("partition", oid::TEXT),
    Column::new("fire_at", oid::TIMESTAMPTZ),
];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    pub queue: Name,
    /// `None`: partition `Default`.
    pub partition: Option<Name>,
    /// Scheduling an unfired key again replaces it.
    pub key: Name,
    pub fire: FireAt,
    /// JSON text; a literal is valid JSON.
    pub payload: Json,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FireAt {
    /// Read as a `timestamptz` literal in the session's TimeZone.
    At(Timestamp),
    /// A duration from when the statement runs.
    After(Value<Duration>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CancelSchedule {
    pub key: Name,
    pub queue: Name,
}

impl Schedule {
    pub(crate) fn parse(cursor: &mut Cursor<'_>) -> Result<Schedule> {
        cursor.expect_keyword("SCHEDULE")?;
        cursor.expect_keyword("INTO")?;
        let queue = cursor.name("queue")?;
        let partition = if cursor.eat_keyword("PARTITION") {
            Some(cursor.name("partition")?)
        } else {
            None
        };
        cursor.expect_keyword("KEY")?;
        let key = cursor.name("timer key")?;
        let fire = if cursor.eat_keyword("AT") {
            FireAt::At(cursor.text_value("a timestamp string or parameter")?)
        } else if cursor.eat_keyword("AFTER") {
            FireAt::After(cursor.duration("AFTER")?)
        } else {
            return Err(cursor.unexpected("AT 'timestamp' or AFTER duration"));
        };
        cursor.expect_keyword("VALUES")?;
        cursor.expect(&TokenKind::LeftParen, "\"(\" before the payload")?;
        let payload = cursor.json("payload")?;
        cursor.expect(
            &TokenKind::RightParen,
            "\")\" after the payload: a timer carries one payload",
        )?;
        Ok(Schedule {
            queue,
            partition,
            key,
            fire,
            payload,
        })
    }

    pub(crate) fn describe_params(&self, params: &mut ParamTypes) {
        params.note(&self.queue, oid::TEXT);
        params.note_all(&self.partition, oid::TEXT);
        params.note(&self.key, oid::TEXT);
        match &self.fire {
            FireAt::At(timestamp) => params.note(timestamp, oid::TIMESTAMPTZ),
            FireAt::After(duration) => params.note(duration, oid::TEXT),
        }
        params.note(&self.payload, oid::JSONB);
    }
}

impl CancelSchedule {
    pub(crate) fn parse(cursor: &mut Cursor<'_>) -> Result<CancelSchedule> {
        cursor.expect_keyword("CANCEL")?;
        cursor.expect_keyword("SCHEDULE")?;
        let key = cursor.name("timer key")?;
        cursor.expect_keyword("ON")?;
        let queue = cursor.name("queue")?;
        Ok(CancelSchedule { key, queue })
    }

    pub(crate) fn describe_params(&self, params: &mut ParamTypes) {
        params.note(&self.key, oid::TEXT);
        params.note(&self.queue, oid::TEXT);
    }
}

/// `SHOW SCHEDULES [ON queue]`.
pub(crate) fn parse_show(cursor: &mut Cursor<'_>) -> Result<Statement> {
    cursor.expect_keyword("SHOW")?;
    cursor.expect_keyword("SCHEDULES")?;
    let queue = optional_on_queue(cursor)?;
    Ok(Statement::ShowSchedules { queue })
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{error, lit, ok};
    use super::*;

    #[test]
    fn schedule_at_a_timestamp() {
        assert_eq!(
            ok("SCHEDULE INTO reminders KEY invoice-42 AT '2030-01-01 09:00:00+01' VALUES ('{\"id\":42}')"),
            Statement::Schedule(Schedule {
                queue: lit("reminders"),
                partition: None,
                key: lit("invoice-42"),
                fire: FireAt::At(lit("2030-01-01 09:00:00+01")),
                payload: lit("{\"id\":42}")
            })
        );
    }

    #[test]
    fn schedule_after_a_duration_into_a_partition() {
        let statement = ok("schedule into q partition p key k after '1 hour' values ('[]');");
        assert_eq!(
            statement,
            Statement::Schedule(Schedule {
                queue: lit("q"),
                partition: Some(lit("p")),
                key: lit("k"),
                fire: FireAt::After(Value::Literal(Duration::from_secs(3600))),
                payload: lit("[]")
            })
        );
        assert_eq!(statement.columns(), SCHEDULE_COLUMNS);
        assert_eq!(statement.command_tag(1), "SELECT 1");
    }

    #[test]
    fn schedule_parameters() {
        let statement = ok("SCHEDULE INTO $1 KEY $2 AT $3 VALUES ($4)");
        assert_eq!(
            statement.param_types(),
            vec![oid::TEXT, oid::TEXT, oid::TIMESTAMPTZ, oid::JSONB]
        );
        let statement = ok("SCHEDULE INTO $1 KEY $2 AFTER $3 VALUES ($4)");
        assert_eq!(
            statement.param_types(),
            vec![oid::TEXT, oid::TEXT, oid::TEXT, oid::JSONB]
        );
    }

    #[test]
    fn schedule_errors() {
        assert_eq!(
            error("SCHEDULE INTO q KEY k VALUES ('1')"),
            ("42601", Some(23))
        );
        assert_eq!(
            error("SCHEDULE INTO q AFTER 5 VALUES ('1')"),
            ("42601", Some(17))
        );
        assert_eq!(
            error("SCHEDULE INTO q KEY k AFTER 5 VALUES ('x')"),
            ("22P02", Some(39))
        );
        assert_eq!(
            error("SCHEDULE INTO q KEY k AFTER 5 VALUES ('1'), ('2')"),
            ("42601", Some(43))
        );
        assert_eq!(
            error("SCHEDULE INTO q KEY k AFTER 5 VALUES ('1', '2')"),
            ("42601", Some(42))
        );
        assert_eq!(
            error("SCHEDULE INTO q KEY k AT 5 VALUES ('1')"),
            ("42601", Some(26))
        );
    }

    #[test]
    fn cancel_schedule() {
        let statement = ok("CANCEL SCHEDULE invoice-42 ON reminders");
        assert_eq!(
            statement,
            Statement::CancelSchedule(CancelSchedule {
                key: lit("invoice-42"),
                queue: lit("reminders")
            })
        );
        assert_eq!(statement.columns(), CANCEL_COLUMNS);
        assert_eq!(error("CANCEL SCHEDULE k"), ("42601", Some(18)));
    }

    #[test]
    fn show_schedules() {
        assert_eq!(
            ok("SHOW SCHEDULES"),
            Statement::ShowSchedules { queue: None }
        );
        let statement = ok("SHOW SCHEDULES ON reminders");
        assert_eq!(
            statement,
            Statement::ShowSchedules {
                queue: Some(lit("reminders"))
            }
        );
        assert_eq!(statement.columns(), SHOW_COLUMNS);
    }
}
