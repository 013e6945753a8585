//! Queue options of `CREATE QUEUE … WITH (…)` and `ALTER QUEUE … SET (…)`:
//! the queue configuration of the seeds (`queen.queues` columns), each with
//! the kind of value it takes.

use std::time::Duration;

use super::cursor::{Cursor, Result};
use super::duration::parse_duration;
use super::error::{quoted, ParseError, SqlState};
use super::lexer::TokenKind;
use super::value::{parse_bool, parse_integer, ParamTypes, Value, MAX_NAME_BYTES};
use super::{oid, Oid};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QueueOption {
    LeaseTime,
    RetryLimit,
    RetryDelay,
    DedupWindow,
    DeadLetterQueue,
    DlqAfterMaxRetries,
    DelayedProcessing,
    WindowBuffer,
    RetentionSeconds,
    CompletedRetentionSeconds,
    RetentionEnabled,
    MaxWaitTimeSeconds,
    MaxQueueSize,
    Priority,
    Namespace,
    Task,
    EncryptionEnabled,
    MinPopWaitTime,
    /// The type of the queue's groups: ordered (one lease per partition)
    /// or, when false, shared (one lease per message).
    Ordered,
    /// A shared group's cap of leased-but-unfinished messages per partition.
    MaxInFlight,
    /// `ephemeral` or `durable` (030_ephemeral checks the word).
    Class,
    MaxLength,
    MaxBytes,
    Ttl,
    /// `reject` or `drop_oldest` (030_ephemeral checks the word).
    Overflow,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptionKind {
    /// Any dialect duration; a bare number is seconds.
    Duration,
    Integer,
    Boolean,
    /// Free text, 0–255 bytes without control characters. Of `namespace`
    /// and `task`, empty (`''`, a bare `NULL`, a NULL parameter) clears it.
    Text,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OptionValue {
    Duration(Duration),
    Integer(i64),
    Boolean(bool),
    Text(String),
}

/// One `option = value` of a WITH/SET list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueSetting {
    pub option: QueueOption,
    /// A `$n` is resolved with [`QueueOption::parse_value`] on the bound text.
    pub value: Value<OptionValue>,
}

impl QueueOption {
    pub const ALL: [QueueOption; 25] = [
        QueueOption::LeaseTime,
        QueueOption::RetryLimit,
        QueueOption::RetryDelay,
        QueueOption::DedupWindow,
        QueueOption::DeadLetterQueue,
        QueueOption::DlqAfterMaxRetries,
        QueueOption::DelayedProcessing,
        QueueOption::WindowBuffer,
        QueueOption::RetentionSeconds,
        QueueOption::CompletedRetentionSeconds,
        QueueOption::RetentionEnabled,
        QueueOption::MaxWaitTimeSeconds,
        QueueOption::MaxQueueSize,
        QueueOption::Priority,
        QueueOption::Namespace,
        QueueOption::Task,
        QueueOption::EncryptionEnabled,
        QueueOption::MinPopWaitTime,
        QueueOption::Ordered,
        QueueOption::MaxInFlight,
        QueueOption::Class,
        QueueOption::MaxLength,
        QueueOption::MaxBytes,
        QueueOption::Ttl,
        QueueOption::Overflow,
    ];

    /// The options of the ephemeral class, kept in `queen.ephemeral_queues`
    /// (030) rather than `queen.queues`.
    pub fn is_ephemeral(self) -> bool {
        matches!(
            self,
            QueueOption::Class
                | QueueOption::MaxLength
                | QueueOption::MaxBytes
                | QueueOption::Ttl
                | QueueOption::Overflow
        )
    }

    /// The option's name in the dialect (and the seeds' column name).
    pub fn name(self) -> &'static str {
        match self {
            QueueOption::LeaseTime => "lease_time",
            QueueOption::RetryLimit => "retry_limit",
            QueueOption::RetryDelay => "retry_delay",
            QueueOption::DedupWindow => "dedup_window",
            QueueOption::DeadLetterQueue => "dead_letter_queue",
            QueueOption::DlqAfterMaxRetries => "dlq_after_max_retries",
            QueueOption::DelayedProcessing => "delayed_processing",
            QueueOption::WindowBuffer => "window_buffer",
            QueueOption::RetentionSeconds => "retention_seconds",
            QueueOption::CompletedRetentionSeconds => "completed_retention_seconds",
            QueueOption::RetentionEnabled => "retention_enabled",
            QueueOption::MaxWaitTimeSeconds => "max_wait_time_seconds",
            QueueOption::MaxQueueSize => "max_queue_size",
            QueueOption::Priority => "priority",
            QueueOption::Namespace => "namespace",
            QueueOption::Task => "task",
            QueueOption::EncryptionEnabled => "encryption_enabled",
            QueueOption::MinPopWaitTime => "min_pop_wait_time",
            QueueOption::Ordered => "ordered",
            QueueOption::MaxInFlight => "max_in_flight",
            QueueOption::Class => "class",
            QueueOption::MaxLength => "max_length",
            QueueOption::MaxBytes => "max_bytes",
            QueueOption::Ttl => "ttl",
            QueueOption::Overflow => "overflow",
        }
    }

    pub fn kind(self) -> OptionKind {
        match self {
            QueueOption::LeaseTime
            | QueueOption::RetryDelay
            | QueueOption::DedupWindow
            | QueueOption::DelayedProcessing
            | QueueOption::WindowBuffer
            | QueueOption::RetentionSeconds
            | QueueOption::CompletedRetentionSeconds
            | QueueOption::MaxWaitTimeSeconds
            | QueueOption::MinPopWaitTime
            | QueueOption::Ttl => OptionKind::Duration,
            QueueOption::RetryLimit
            | QueueOption::MaxQueueSize
            | QueueOption::Priority
            | QueueOption::MaxLength
            | QueueOption::MaxBytes
            | QueueOption::MaxInFlight => OptionKind::Integer,
            QueueOption::DeadLetterQueue
            | QueueOption::DlqAfterMaxRetries
            | QueueOption::RetentionEnabled
            | QueueOption::EncryptionEnabled
            | QueueOption::Ordered => OptionKind::Boolean,
            QueueOption::Namespace
            | QueueOption::Task
            | QueueOption::Class
            | QueueOption::Overflow => OptionKind::Text,
        }
    }

    /// Option names are matched case-insensitively, as PostgreSQL folds
    /// unquoted reloption names.
    pub fn from_name(name: &str) -> Option<QueueOption> {
        // `encryption`: Queen's short name of the column.
        if name.eq_ignore_ascii_case("encryption") {
            return Some(QueueOption::EncryptionEnabled);
        }
        QueueOption::ALL
            .into_iter()
            .find(|option| option.name().eq_ignore_ascii_case(name))
    }

    /// An empty value (`''`, `NULL`) leaves the queue without this option:
    /// a wildcard POP names no empty namespace or task.
    pub fn clears_when_empty(self) -> bool {
        matches!(self, QueueOption::Namespace | QueueOption::Task)
    }

    /// What Describe reports for a `$n` standing for this option's value.
    pub fn param_type(self) -> Oid {
        match self.kind() {
            OptionKind::Duration | OptionKind::Text => oid::TEXT,
            OptionKind::Integer => oid::INT8,
            OptionKind::Boolean => oid::BOOL,
        }
    }

    /// Converts value text (a literal, or a bound parameter's text) to this
    /// option's kind; every failure is `22023`.
    pub fn parse_value(self, text: &str) -> std::result::Result<OptionValue, ParseError> {
        let name = self.name();
        let invalid = |expected: &str| {
            ParseError::new(
                SqlState::INVALID_PARAMETER_VALUE,
                format!(
                    "invalid value for option {name}: expected {expected}, got {}",
                    quoted(text)
                ),
            )
        };
        match self.kind() {
            OptionKind::Duration => {
                parse_duration(text)
                    .map(OptionValue::Duration)
                    .map_err(|err| {
                        ParseError::new(
                            SqlState::INVALID_PARAMETER_VALUE,
                            format!("invalid value for option {name}: {}", err.message),
                        )
                    })
            }
            OptionKind::Integer => {
                let value = parse_integer(text).map_err(|_| invalid("a 64-bit integer"))?;
                let non_negative =
                    matches!(self, QueueOption::RetryLimit | QueueOption::MaxQueueSize);
                if non_negative && value < 0 {
                    return Err(invalid("an integer of at least 0"));
                }
                if matches!(self, QueueOption::MaxLength | QueueOption::MaxBytes) && value < 1 {
                    return Err(invalid("an integer of at least 1"));
                }
                Ok(OptionValue::Integer(value))
            }
            OptionKind::Boolean => parse_bool(text)
                .map(OptionValue::Boolean)
                .ok_or_else(|| invalid("a boolean (true/false, on/off, yes/no, 1/0)")),
            OptionKind::Text => {
                if text.len() > MAX_NAME_BYTES || text.chars().any(char::is_control) {
                    return Err(invalid(&format!(
                        "at most {MAX_NAME_BYTES} bytes without control characters"
                    )));
                }
                // The words of `class` and `overflow` are read as
                // PostgreSQL reads its keywords: in any case.
                if matches!(self, QueueOption::Class | QueueOption::Overflow) {
                    return Ok(OptionValue::Text(text.to_ascii_lowercase()));
                }
                Ok(OptionValue::Text(text.to_string()))
            }
        }
    }
}

fn known_names() -> String {
    QueueOption::ALL.map(QueueOption::name).join(", ")
}

/// `( option = value [, …] )`. A boolean option alone (`WITH (retention_enabled)`)
/// means true, as PostgreSQL's reloptions do.
pub(crate) fn parse_settings(cursor: &mut Cursor<'_>) -> Result<Vec<QueueSetting>> {
    cursor.expect(&TokenKind::LeftParen, "\"(\" before the option list")?;
    let mut settings: Vec<QueueSetting> = Vec::new();
    loop {
        let name_token = cursor.peek().clone();
        let name = match &name_token.kind {
            TokenKind::Word(word) => (*word).to_string(),
            TokenKind::QuotedIdent(text) => text.clone(),
            _ => return Err(cursor.unexpected("an option name")),
        };
        let option = QueueOption::from_name(&name).ok_or_else(|| {
            ParseError::new(
                SqlState::INVALID_PARAMETER_VALUE,
                format!(
                    "unknown queue option {}; known options: {}",
                    quoted(&name),
                    known_names()
                ),
            )
            .at(cursor.position(&name_token))
        })?;
        cursor.once(
            settings.iter().any(|setting| setting.option == option),
            &name_token,
            &format!("option {}", option.name()),
        )?;
        cursor.advance();
        let value = if cursor.eat(&TokenKind::Equals) {
            option_value(cursor, option)?
        } else if option.kind() == OptionKind::Boolean
            && matches!(cursor.peek().kind, TokenKind::Comma | TokenKind::RightParen)
        {
            Value::Literal(OptionValue::Boolean(true))
        } else {
            return Err(cursor.unexpected(&format!("\"=\" after option {}", option.name())));
        };
        settings.push(QueueSetting { option, value });
        if !cursor.eat(&TokenKind::Comma) {
            cursor.expect(&TokenKind::RightParen, "\",\" or \")\"")?;
            return Ok(settings);
        }
    }
}

/// The value after `=`: a word (`30`, `on`, `billing`), a string, a quoted
/// identifier or `$n`.
fn option_value(cursor: &mut Cursor<'_>, option: QueueOption) -> Result<Value<OptionValue>> {
    let token = cursor.peek().clone();
    let text = match &token.kind {
        TokenKind::Param(n) => {
            cursor.advance();
            return Ok(Value::Param(*n));
        }
        // A bare NULL clears a text option (`namespace = NULL`).
        TokenKind::Word(word)
            if option.clears_when_empty() && word.eq_ignore_ascii_case("null") =>
        {
            String::new()
        }
        TokenKind::Word(word) => (*word).to_string(),
        TokenKind::String(text) | TokenKind::QuotedIdent(text) => text.clone(),
        _ => return Err(cursor.unexpected(&format!("a value for option {}", option.name()))),
    };
    let value = option
        .parse_value(&text)
        .map_err(|err| err.at(cursor.position(&token)))?;
    cursor.advance();
    Ok(Value::Literal(value))
}

pub(crate) fn describe_params(settings: &[QueueSetting], params: &mut ParamTypes) {
    for setting in settings {
        params.note(&setting.value, setting.option.param_type());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_option_round_trips_its_name() {
        for option in QueueOption::ALL {
            assert_eq!(QueueOption::from_name(option.name()), Some(option));
            assert_eq!(
                QueueOption::from_name(&option.name().to_uppercase()),
                Some(option)
            );
        }
        assert_eq!(QueueOption::from_name("lease"), None);
        assert_eq!(
            QueueOption::from_name("Encryption"),
            Some(QueueOption::EncryptionEnabled)
        );
    }

    #[test]
    fn values_by_kind() {
        assert_eq!(
            QueueOption::LeaseTime.parse_value("30"),
            Ok(OptionValue::Duration(Duration::from_secs(30)))
        );
        assert_eq!(
            QueueOption::RetryDelay.parse_value("250ms"),
            Ok(OptionValue::Duration(Duration::from_millis(250)))
        );
        assert_eq!(
            QueueOption::RetentionSeconds.parse_value("7 days"),
            Ok(OptionValue::Duration(Duration::from_secs(7 * 86_400)))
        );
        assert_eq!(
            QueueOption::Priority.parse_value("-2"),
            Ok(OptionValue::Integer(-2))
        );
        assert_eq!(
            QueueOption::DeadLetterQueue.parse_value("off"),
            Ok(OptionValue::Boolean(false))
        );
        assert_eq!(
            QueueOption::Namespace.parse_value("billing"),
            Ok(OptionValue::Text("billing".into()))
        );
    }

    #[test]
    fn wrong_kind_of_value_is_22023() {
        for (option, text) in [
            (QueueOption::LeaseTime, "soon"),
            (QueueOption::LeaseTime, "-5"),
            (QueueOption::RetryLimit, "three"),
            (QueueOption::RetryLimit, "-1"),
            (QueueOption::MaxQueueSize, "1.5"),
            (QueueOption::RetentionEnabled, "maybe"),
            (QueueOption::Task, "a\nb"),
        ] {
            assert_eq!(
                option.parse_value(text).unwrap_err().sqlstate.code(),
                "22023",
                "{option:?} {text}"
            );
        }
    }
}
