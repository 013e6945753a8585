//! Timers:
//! `SCHEDULE INTO queue [PARTITION part] KEY k (AT 'timestamp' | AFTER duration
//! | EVERY duration | CRON 'expr' [TIMEZONE 'zone']) [CATCH UP] VALUES (payload)`
//! (`CATCH UP` may also follow the payload),
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
    Column::new("recurrence", oid::TEXT),
    Column::new("catch_up", oid::BOOL),
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
    /// A recurring timer fires every missed occurrence after downtime, not
    /// just one.
    pub catch_up: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FireAt {
    /// Read as a `timestamptz` literal in the session's TimeZone.
    At(Timestamp),
    /// A duration from when the statement runs.
    After(Value<Duration>),
    /// Recurring: first after this duration, then every this long.
    Every(Value<Duration>),
    /// Recurring: at the occurrences of a five-field cron expression, read
    /// in `time_zone` (`None`: UTC).
    Cron {
        expr: Value<String>,
        time_zone: Option<Value<String>>,
    },
}

impl FireAt {
    pub fn recurring(&self) -> bool {
        matches!(self, FireAt::Every(_) | FireAt::Cron { .. })
    }
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
        } else if cursor.eat_keyword("EVERY") {
            FireAt::Every(cursor.duration("EVERY")?)
        } else if cursor.eat_keyword("CRON") {
            let expr = cursor.text_value("a cron expression string or parameter")?;
            let time_zone = if cursor.eat_keyword("TIMEZONE") {
                Some(cursor.text_value("a time zone name string or parameter")?)
            } else {
                None
            };
            FireAt::Cron { expr, time_zone }
        } else {
            return Err(cursor.unexpected(
                "AT 'timestamp', AFTER duration, EVERY duration or CRON 'expression'",
            ));
        };
        let mut catch_up = fire.recurring() && eat_catch_up(cursor)?;
        cursor.expect_keyword("VALUES")?;
        cursor.expect(&TokenKind::LeftParen, "\"(\" before the payload")?;
        let payload = cursor.json("payload")?;
        cursor.expect(
            &TokenKind::RightParen,
            "\")\" after the payload: a timer carries one payload",
        )?;
        if fire.recurring() && !catch_up {
            catch_up = eat_catch_up(cursor)?;
        }
        Ok(Schedule {
            queue,
            partition,
            key,
            fire,
            payload,
            catch_up,
        })
    }

    pub(crate) fn describe_params(&self, params: &mut ParamTypes) {
        params.note(&self.queue, oid::TEXT);
        params.note_all(&self.partition, oid::TEXT);
        params.note(&self.key, oid::TEXT);
        match &self.fire {
            FireAt::At(timestamp) => params.note(timestamp, oid::TIMESTAMPTZ),
            FireAt::After(duration) | FireAt::Every(duration) => params.note(duration, oid::TEXT),
            FireAt::Cron { expr, time_zone } => {
                params.note(expr, oid::TEXT);
                params.note_all(time_zone, oid::TEXT);
            }
        }
        params.note(&self.payload, oid::JSONB);
    }
}

/// `CATCH UP`, if next.
fn eat_catch_up(cursor: &mut Cursor<'_>) -> Result<bool> {
    if cursor.eat_keyword("CATCH") {
        cursor.expect_keyword("UP")?;
        return Ok(true);
    }
    Ok(false)
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
                payload: lit("{\"id\":42}"),
                catch_up: false,
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
                payload: lit("[]"),
                catch_up: false,
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
    fn recurring_schedules() {
        assert_eq!(
            ok("SCHEDULE INTO q KEY k EVERY '5m' VALUES ('{}')"),
            Statement::Schedule(Schedule {
                queue: lit("q"),
                partition: None,
                key: lit("k"),
                fire: FireAt::Every(Value::Literal(Duration::from_secs(300))),
                payload: lit("{}"),
                catch_up: false,
            })
        );
        let cron = FireAt::Cron {
            expr: lit("*/5 * * * *"),
            time_zone: Some(lit("Europe/Berlin")),
        };
        for sql in [
            "SCHEDULE INTO q KEY k CRON '*/5 * * * *' TIMEZONE 'Europe/Berlin' CATCH UP VALUES ('1')",
            "schedule into q key k cron '*/5 * * * *' timezone 'Europe/Berlin' values ('1') catch up",
        ] {
            assert_eq!(
                ok(sql),
                Statement::Schedule(Schedule {
                    queue: lit("q"),
                    partition: None,
                    key: lit("k"),
                    fire: cron.clone(),
                    payload: lit("1"),
                    catch_up: true,
                }),
                "{sql}"
            );
        }
        let statement = ok("SCHEDULE INTO $1 KEY $2 CRON $3 TIMEZONE $4 VALUES ($5)");
        assert_eq!(
            statement.param_types(),
            vec![oid::TEXT, oid::TEXT, oid::TEXT, oid::TEXT, oid::JSONB]
        );
        // CATCH UP means nothing for a one-shot timer.
        assert_eq!(
            error("SCHEDULE INTO q KEY k AFTER 5 CATCH UP VALUES ('1')"),
            ("42601", Some(31))
        );
        assert_eq!(
            error("SCHEDULE INTO q KEY k EVERY '5m' CATCH VALUES ('1')"),
            ("42601", Some(40))
        );
        assert_eq!(
            error("SCHEDULE INTO q KEY k CRON 5 VALUES ('1')"),
            ("42601", Some(28))
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
