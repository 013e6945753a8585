//! CREATE/ALTER QUEUE, SEEK GROUP, DROP GROUP and ALTER GROUP as their
//! calls (`crate::calls::admin`, `crate::calls::groups`).

use super::pop::subscription;
use crate::calls::admin::{Configure, ConfigureMode, DropGroup, GroupSetType, Seek};
use crate::calls::groups::Subscribe;
use crate::json::{JsonValue, Object};
use crate::protocol::{SqlError, SqlState};
use crate::rewrite::bind::{parse_error, Params};
use crate::rewrite::dialect::options::{OptionValue, QueueSetting};
use crate::rewrite::dialect::pop::SubscribeFrom;
use crate::rewrite::dialect::queue_admin::{
    DropGroup as DropGroupStatement, SeekGroup, SeekTarget,
};
use crate::rewrite::dialect::{QueueOption, Value};
use uuid::Uuid;

/// CREATE or ALTER QUEUE.
pub fn configure(
    queue: &Value<String>,
    settings: &[QueueSetting],
    mode: ConfigureMode,
    params: &Params<'_>,
    tenant: Uuid,
) -> Result<Configure, SqlError> {
    Ok(Configure {
        queue: params.name(queue, "queue")?,
        options: options_json(settings, params)?,
        mode: mode.as_str(),
        tenant,
    })
}

/// The JSON object `configure_queue_v1` takes: durations in each column's
/// unit (milliseconds for retry_delay and min_pop_wait_time, whole seconds
/// rounded up otherwise).
fn options_json(settings: &[QueueSetting], params: &Params<'_>) -> Result<String, SqlError> {
    let mut object = Object::new();
    for s in settings {
        let value = match &s.value {
            Value::Literal(v) => v.clone(),
            Value::Param(n) => match params.opt_text(&Value::Param(*n))? {
                Some(text) => s.option.parse_value(&text).map_err(parse_error)?,
                None if s.option.clears_when_empty() => OptionValue::Text(String::new()),
                None => {
                    return Err(SqlError::error(
                        SqlState::NULL_VALUE_NOT_ALLOWED,
                        format!("{} (${n}) must not be NULL", s.option.name()),
                    ))
                }
            },
        };
        let json = match &value {
            OptionValue::Duration(d)
                if matches!(
                    s.option,
                    QueueOption::RetryDelay | QueueOption::MinPopWaitTime | QueueOption::Ttl
                ) =>
            {
                // Stored in milliseconds as an integer: say so when it does
                // not fit, in the unit the client wrote.
                if d.as_millis() > i32::MAX as u128 {
                    return Err(SqlError::error(
                        SqlState::INVALID_PARAMETER_VALUE,
                        format!(
                            "queue option {} is out of range: at most 2147483647 milliseconds \
                             (about 24.8 days), got {} seconds",
                            s.option.name(),
                            d.as_secs_f64()
                        ),
                    ));
                }
                JsonValue::Uint(d.as_millis())
            }
            OptionValue::Duration(d) => {
                JsonValue::Uint(u128::from(d.as_secs()) + u128::from(d.subsec_nanos() > 0))
            }
            OptionValue::Integer(v) => JsonValue::Int(*v),
            OptionValue::Boolean(b) => JsonValue::Bool(*b),
            OptionValue::Text(t) if t.is_empty() && s.option.clears_when_empty() => JsonValue::Null,
            OptionValue::Text(t) => JsonValue::Str(t),
        };
        object = object.member(s.option.name(), json);
    }
    Ok(object.finish())
}

pub fn seek(stmt: &SeekGroup, params: &Params<'_>, tenant: Uuid) -> Result<Seek, SqlError> {
    let queue = params.name(&stmt.queue, "queue")?;
    let group = params.name(&stmt.group, "group")?;
    let partition = stmt
        .partition
        .as_ref()
        .map(|p| params.name(p, "partition"))
        .transpose()?;
    let (target, at) = match &stmt.target {
        SeekTarget::Beginning => ("beginning", None),
        SeekTarget::End => ("end", None),
        SeekTarget::Timestamp(ts) => ("timestamp", Some(params.text(ts, "TIMESTAMP")?)),
    };
    Ok(Seek {
        queue,
        group,
        partition,
        target,
        at,
        tenant,
    })
}

pub fn drop_group(
    stmt: &DropGroupStatement,
    params: &Params<'_>,
    tenant: Uuid,
) -> Result<DropGroup, SqlError> {
    Ok(DropGroup {
        queue: params.name(&stmt.queue, "queue")?,
        group: params.name(&stmt.group, "group")?,
        tenant,
    })
}

pub fn group_set_type(
    queue: &Value<String>,
    group: &Value<String>,
    ordered: &Value<OptionValue>,
    params: &Params<'_>,
    tenant: Uuid,
) -> Result<GroupSetType, SqlError> {
    let value = match ordered {
        Value::Literal(v) => v.clone(),
        Value::Param(n) => {
            let text = params.text(&Value::Param(*n), "ordered")?;
            QueueOption::Ordered
                .parse_value(&text)
                .map_err(parse_error)?
        }
    };
    let OptionValue::Boolean(ordered) = value else {
        return Err(SqlError::error(
            crate::protocol::SqlState::INVALID_PARAMETER_VALUE,
            "ordered needs a boolean (true/false/on/off)",
        ));
    };
    Ok(GroupSetType {
        queue: params.name(queue, "queue")?,
        group: params.name(group, "group")?,
        ordered,
        tenant,
    })
}

/// ALTER GROUP … SUBSCRIBE FROM.
pub fn subscribe(
    queue: &Value<String>,
    group: &Value<String>,
    from: &SubscribeFrom,
    params: &Params<'_>,
    tenant: Uuid,
) -> Result<Subscribe, SqlError> {
    let (mode, at) = subscription(Some(from), params)?;
    Ok(Subscribe {
        queue: params.name(queue, "queue")?,
        group: params.name(group, "group")?,
        mode,
        at,
        tenant,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calls::admin::{CONFIGURE, SEEK_GROUP};
    use crate::calls::Call;
    use crate::rewrite::dialect::{self, Statement};

    fn parse(sql: &str) -> Statement {
        dialect::parse(sql).unwrap().unwrap()
    }

    #[test]
    fn options_become_column_units() {
        let Statement::CreateQueue(c) = parse(
            "CREATE QUEUE q WITH (lease_time = '250ms', retry_delay = '2s', retry_limit = 5, dead_letter_queue = off, namespace = 'a\"b')",
        ) else {
            panic!("parse");
        };
        let call = configure(
            &c.queue,
            &c.settings,
            ConfigureMode::Create,
            &Params(&[]),
            Uuid::nil(),
        )
        .unwrap();
        assert_eq!(
            call.options,
            r#"{"lease_time":1,"retry_delay":2000,"retry_limit":5,"dead_letter_queue":false,"namespace":"a\"b"}"#
        );
        assert_eq!(call.mode, "create");
        assert_eq!(call.params().len(), CONFIGURE.params.len());
    }

    #[test]
    fn a_millisecond_option_that_does_not_fit_says_so_in_seconds() {
        let Statement::CreateQueue(c) = parse("CREATE QUEUE q WITH (retry_delay = 2147483647)")
        else {
            panic!("parse");
        };
        let err = configure(
            &c.queue,
            &c.settings,
            ConfigureMode::Create,
            &Params(&[]),
            Uuid::nil(),
        )
        .unwrap_err();
        assert_eq!(err.code(), "22023");
        assert!(
            err.message.contains("got 2147483647 seconds"),
            "{}",
            err.message
        );
    }

    #[test]
    fn seek_and_drop_group_bind_their_names() {
        let Statement::SeekGroup(s) = parse("SEEK GROUP g ON $1 TO END") else {
            panic!("parse");
        };
        let call = seek(&s, &Params(&[Some("q".into())]), Uuid::nil()).unwrap();
        assert_eq!(
            (call.queue.as_str(), call.target, call.at.as_deref()),
            ("q", "end", None)
        );
        assert_eq!(call.params().len(), SEEK_GROUP.params.len());
        let Statement::DropGroup(d) = parse("DROP GROUP $1 ON q") else {
            panic!("parse");
        };
        assert_eq!(
            drop_group(&d, &Params(&[None]), Uuid::nil())
                .unwrap_err()
                .code(),
            "22004"
        );
    }
}
