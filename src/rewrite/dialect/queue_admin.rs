//! Queue administration:
//! `CREATE QUEUE [IF NOT EXISTS] queue [WITH (option = value, ...)]`,
//! `ALTER QUEUE queue SET (option = value, ...)`,
//! `DROP QUEUE [IF EXISTS] queue`,
//! `SEEK GROUP grp ON queue [PARTITION part] TO (BEGINNING | END | TIMESTAMP 'ts')`,
//! `DROP GROUP grp ON queue`.
//!
//! None of them returns rows; each ends with its own command tag.

use super::cursor::{Cursor, Result};
use super::oid;
use super::options::{self, QueueSetting};
use super::value::{Name, ParamTypes, Timestamp};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateQueue {
    pub queue: Name,
    /// On an existing queue, change nothing (and do not fail).
    pub if_not_exists: bool,
    /// Possibly empty; never names an option twice.
    pub settings: Vec<QueueSetting>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlterQueue {
    pub queue: Name,
    /// At least one; only these options change.
    pub settings: Vec<QueueSetting>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DropQueue {
    pub queue: Name,
    pub if_exists: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeekGroup {
    pub group: Name,
    pub queue: Name,
    /// `None`: every partition of the queue.
    pub partition: Option<Name>,
    pub target: SeekTarget,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SeekTarget {
    Beginning,
    End,
    Timestamp(Timestamp),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DropGroup {
    pub group: Name,
    pub queue: Name,
}

impl CreateQueue {
    pub(crate) fn parse(cursor: &mut Cursor<'_>) -> Result<CreateQueue> {
        cursor.expect_keyword("CREATE")?;
        cursor.expect_keyword("QUEUE")?;
        // `IF` is a clause only when `NOT` follows, so a queue may be named `if`.
        let if_not_exists = cursor.peek_keyword("IF") && cursor.peek_ahead(1).is_keyword("NOT");
        if if_not_exists {
            cursor.advance();
            cursor.expect_keyword("NOT")?;
            cursor.expect_keyword("EXISTS")?;
        }
        let queue = cursor.name("queue")?;
        let settings = if cursor.eat_keyword("WITH") {
            options::parse_settings(cursor)?
        } else {
            Vec::new()
        };
        Ok(CreateQueue {
            queue,
            if_not_exists,
            settings,
        })
    }

    pub(crate) fn describe_params(&self, params: &mut ParamTypes) {
        params.note(&self.queue, oid::TEXT);
        options::describe_params(&self.settings, params);
    }
}

impl AlterQueue {
    pub(crate) fn parse(cursor: &mut Cursor<'_>) -> Result<AlterQueue> {
        cursor.expect_keyword("ALTER")?;
        cursor.expect_keyword("QUEUE")?;
        let queue = cursor.name("queue")?;
        cursor.expect_keyword("SET")?;
        let settings = options::parse_settings(cursor)?;
        Ok(AlterQueue { queue, settings })
    }

    pub(crate) fn describe_params(&self, params: &mut ParamTypes) {
        params.note(&self.queue, oid::TEXT);
        options::describe_params(&self.settings, params);
    }
}

impl DropQueue {
    pub(crate) fn parse(cursor: &mut Cursor<'_>) -> Result<DropQueue> {
        cursor.expect_keyword("DROP")?;
        cursor.expect_keyword("QUEUE")?;
        let if_exists = cursor.peek_keyword("IF") && cursor.peek_ahead(1).is_keyword("EXISTS");
        if if_exists {
            cursor.advance();
            cursor.advance();
        }
        let queue = cursor.name("queue")?;
        Ok(DropQueue { queue, if_exists })
    }

    pub(crate) fn describe_params(&self, params: &mut ParamTypes) {
        params.note(&self.queue, oid::TEXT);
    }
}

impl SeekGroup {
    pub(crate) fn parse(cursor: &mut Cursor<'_>) -> Result<SeekGroup> {
        cursor.expect_keyword("SEEK")?;
        cursor.expect_keyword("GROUP")?;
        let group = cursor.name("group")?;
        cursor.expect_keyword("ON")?;
        let queue = cursor.name("queue")?;
        let partition = if cursor.eat_keyword("PARTITION") {
            Some(cursor.name("partition")?)
        } else {
            None
        };
        cursor.expect_keyword("TO")?;
        let target = if cursor.eat_keyword("BEGINNING") {
            SeekTarget::Beginning
        } else if cursor.eat_keyword("END") {
            SeekTarget::End
        } else if cursor.eat_keyword("TIMESTAMP") {
            SeekTarget::Timestamp(cursor.text_value("a timestamp string or parameter")?)
        } else {
            return Err(cursor.unexpected("BEGINNING, END or TIMESTAMP 'timestamp'"));
        };
        Ok(SeekGroup {
            group,
            queue,
            partition,
            target,
        })
    }

    pub(crate) fn describe_params(&self, params: &mut ParamTypes) {
        params.note(&self.group, oid::TEXT);
        params.note(&self.queue, oid::TEXT);
        params.note_all(&self.partition, oid::TEXT);
        if let SeekTarget::Timestamp(timestamp) = &self.target {
            params.note(timestamp, oid::TIMESTAMPTZ);
        }
    }
}

impl DropGroup {
    pub(crate) fn parse(cursor: &mut Cursor<'_>) -> Result<DropGroup> {
        cursor.expect_keyword("DROP")?;
        cursor.expect_keyword("GROUP")?;
        let group = cursor.name("group")?;
        cursor.expect_keyword("ON")?;
        let queue = cursor.name("queue")?;
        Ok(DropGroup { group, queue })
    }

    pub(crate) fn describe_params(&self, params: &mut ParamTypes) {
        params.note(&self.group, oid::TEXT);
        params.note(&self.queue, oid::TEXT);
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{error, lit, ok};
    use std::time::Duration;

    use super::super::options::{OptionValue, QueueOption};
    use super::super::{parse, Statement, Value};
    use super::*;

    fn setting(option: QueueOption, value: OptionValue) -> QueueSetting {
        QueueSetting {
            option,
            value: Value::Literal(value),
        }
    }

    #[test]
    fn create_plain_and_if_not_exists() {
        assert_eq!(
            ok("CREATE QUEUE orders"),
            Statement::CreateQueue(CreateQueue {
                queue: lit("orders"),
                if_not_exists: false,
                settings: vec![]
            })
        );
        assert_eq!(
            ok("create queue if not exists \"Orders\";"),
            Statement::CreateQueue(CreateQueue {
                queue: lit("Orders"),
                if_not_exists: true,
                settings: vec![]
            })
        );
        let Statement::CreateQueue(named_if) = ok("CREATE QUEUE if") else {
            panic!()
        };
        assert_eq!(named_if.queue, lit("if"));
    }

    #[test]
    fn create_with_every_kind_of_option() {
        let statement = ok("CREATE QUEUE q WITH (lease_time = '5m', retry_limit = 5, \
             dead_letter_queue = off, namespace = 'billing', RETENTION_SECONDS = 86400, \
             retention_enabled, priority = $1)");
        let Statement::CreateQueue(create) = &statement else {
            panic!()
        };
        assert_eq!(
            create.settings,
            vec![
                setting(
                    QueueOption::LeaseTime,
                    OptionValue::Duration(Duration::from_secs(300))
                ),
                setting(QueueOption::RetryLimit, OptionValue::Integer(5)),
                setting(QueueOption::DeadLetterQueue, OptionValue::Boolean(false)),
                setting(QueueOption::Namespace, OptionValue::Text("billing".into())),
                setting(
                    QueueOption::RetentionSeconds,
                    OptionValue::Duration(Duration::from_secs(86_400))
                ),
                setting(QueueOption::RetentionEnabled, OptionValue::Boolean(true)),
                QueueSetting {
                    option: QueueOption::Priority,
                    value: Value::Param(1)
                },
            ]
        );
        assert_eq!(statement.param_types(), vec![oid::INT8]);
        assert_eq!(statement.columns(), &[]);
        assert_eq!(statement.command_tag(0), "CREATE QUEUE");
    }

    #[test]
    fn option_errors() {
        let Some(Err(err)) = parse("CREATE QUEUE q WITH (lease = 5)") else {
            panic!()
        };
        assert_eq!((err.sqlstate.code(), err.position), ("22023", Some(22)));
        for option in QueueOption::ALL {
            assert!(err.message.contains(option.name()), "{}", err.message);
        }
        assert_eq!(
            error("CREATE QUEUE q WITH (retry_limit = 'x')"),
            ("22023", Some(36))
        );
        assert_eq!(
            error("CREATE QUEUE q WITH (lease_time = true)"),
            ("22023", Some(35))
        );
        assert_eq!(
            error("CREATE QUEUE q WITH (dead_letter_queue = 5s)"),
            ("22023", Some(42))
        );
        assert_eq!(
            error("CREATE QUEUE q WITH (retry_limit)"),
            ("42601", Some(33))
        );
        assert_eq!(
            error("CREATE QUEUE q WITH (retry_limit = 1, retry_limit = 2)"),
            ("42601", Some(39))
        );
        assert_eq!(error("CREATE QUEUE q WITH ()"), ("42601", Some(22)));
        assert_eq!(
            error("CREATE QUEUE q WITH (retry_limit = 1"),
            ("42601", Some(37))
        );
        assert_eq!(
            error("CREATE QUEUE q WITH retry_limit = 1"),
            ("42601", Some(21))
        );
    }

    #[test]
    fn alter_queue_set() {
        assert_eq!(
            ok("ALTER QUEUE q SET (max_queue_size = 1000, task = $1)"),
            Statement::AlterQueue(AlterQueue {
                queue: lit("q"),
                settings: vec![
                    setting(QueueOption::MaxQueueSize, OptionValue::Integer(1000)),
                    QueueSetting {
                        option: QueueOption::Task,
                        value: Value::Param(1)
                    },
                ]
            })
        );
        assert_eq!(
            ok("ALTER QUEUE q SET (retry_limit = 1)").command_tag(0),
            "ALTER QUEUE"
        );
        assert_eq!(
            error("ALTER QUEUE q (retry_limit = 1)"),
            ("42601", Some(15))
        );
        assert_eq!(error("ALTER QUEUE q SET"), ("42601", Some(18)));
    }

    #[test]
    fn drop_queue() {
        assert_eq!(
            ok("DROP QUEUE IF EXISTS billing.invoices"),
            Statement::DropQueue(DropQueue {
                queue: lit("billing.invoices"),
                if_exists: true
            })
        );
        assert_eq!(
            ok("DROP QUEUE $1"),
            Statement::DropQueue(DropQueue {
                queue: Value::Param(1),
                if_exists: false
            })
        );
        assert_eq!(ok("DROP QUEUE q").command_tag(0), "DROP QUEUE");
        assert_eq!(error("DROP QUEUE q CASCADE"), ("42601", Some(14)));
    }

    #[test]
    fn seek_group() {
        assert_eq!(
            ok("SEEK GROUP g ON q TO BEGINNING"),
            Statement::SeekGroup(SeekGroup {
                group: lit("g"),
                queue: lit("q"),
                partition: None,
                target: SeekTarget::Beginning
            })
        );
        assert_eq!(
            ok("seek group g on q partition 7 to end"),
            Statement::SeekGroup(SeekGroup {
                group: lit("g"),
                queue: lit("q"),
                partition: Some(lit("7")),
                target: SeekTarget::End
            })
        );
        let statement = ok("SEEK GROUP $1 ON $2 TO TIMESTAMP $3");
        assert_eq!(
            statement.param_types(),
            vec![oid::TEXT, oid::TEXT, oid::TIMESTAMPTZ]
        );
        assert_eq!(statement.command_tag(0), "SEEK GROUP");
        assert_eq!(
            ok("SEEK GROUP g ON q TO TIMESTAMP '2024-05-01 12:00'"),
            Statement::SeekGroup(SeekGroup {
                group: lit("g"),
                queue: lit("q"),
                partition: None,
                target: SeekTarget::Timestamp(lit("2024-05-01 12:00"))
            })
        );
        assert_eq!(
            error("SEEK GROUP g ON q TO '2024-05-01'"),
            ("42601", Some(22))
        );
        assert_eq!(error("SEEK GROUP g TO END"), ("42601", Some(14)));
    }

    #[test]
    fn drop_group() {
        assert_eq!(
            ok("DROP GROUP analytics ON orders"),
            Statement::DropGroup(DropGroup {
                group: lit("analytics"),
                queue: lit("orders")
            })
        );
        assert_eq!(ok("DROP GROUP g ON q").command_tag(5), "DROP GROUP");
        assert_eq!(error("DROP GROUP g ON"), ("42601", Some(16)));
    }

    #[test]
    fn names_are_validated() {
        assert_eq!(error("CREATE QUEUE ''"), ("22023", Some(14)));
        let long = "x".repeat(256);
        assert_eq!(error(&format!("CREATE QUEUE {long}")), ("22023", Some(14)));
        assert_eq!(error("CREATE QUEUE 'a\u{1}b'"), ("22023", Some(14)));
    }
}
