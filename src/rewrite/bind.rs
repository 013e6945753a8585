//! Binding `$n`: the bound parameters of one execution (as text, already
//! converted from the client's formats by the frontend) read as the typed
//! values a statement's calls take, with the same checks the parser applies
//! to literals.

use crate::protocol::SqlError;
use crate::protocol::SqlState;
use crate::rewrite::dialect::{self, ParseError, Value};
use std::time::Duration;

/// The bound parameters of one execution, as text (`None` = NULL).
pub struct Params<'a>(pub &'a [Option<String>]);

pub fn parse_error(e: ParseError) -> SqlError {
    SqlError::error(e.sqlstate, e.message).with_position(e.position)
}

impl Params<'_> {
    fn get(&self, n: usize) -> Result<Option<&str>, SqlError> {
        match n.checked_sub(1).and_then(|i| self.0.get(i)) {
            Some(v) => Ok(v.as_deref()),
            // Only a simple query can name one: a Bind supplies all its
            // statement's. PostgreSQL's words and code.
            None => Err(SqlError::error(
                SqlState::UNDEFINED_PARAMETER,
                format!("there is no parameter ${n}"),
            )),
        }
    }

    fn required(&self, n: usize, what: &str) -> Result<&str, SqlError> {
        self.get(n)?.ok_or_else(|| {
            SqlError::error(
                SqlState::NULL_VALUE_NOT_ALLOWED,
                format!("{what} (${n}) must not be NULL"),
            )
        })
    }

    /// A queue, partition or group name.
    pub fn name(&self, v: &Value<String>, what: &str) -> Result<String, SqlError> {
        match v {
            Value::Literal(s) => Ok(s.clone()),
            Value::Param(n) => {
                let s = self.required(*n, what)?;
                dialect::validate_name(what, s).map_err(parse_error)?;
                Ok(s.to_string())
            }
        }
    }

    /// Free text (reasons, transaction ids); NULL allowed.
    pub fn opt_text(&self, v: &Value<String>) -> Result<Option<String>, SqlError> {
        match v {
            Value::Literal(s) => Ok(Some(s.clone())),
            Value::Param(n) => Ok(self.get(*n)?.map(str::to_string)),
        }
    }

    pub fn text(&self, v: &Value<String>, what: &str) -> Result<String, SqlError> {
        self.text_ref(v, what).map(str::to_string)
    }

    /// [`Params::text`], borrowed.
    pub fn text_ref<'s>(&'s self, v: &'s Value<String>, what: &str) -> Result<&'s str, SqlError> {
        match v {
            Value::Literal(s) => Ok(s),
            Value::Param(n) => self.required(*n, what),
        }
    }

    /// JSON text, checked, at most `max_bytes`.
    pub fn json(
        &self,
        v: &Value<String>,
        what: &str,
        max_bytes: usize,
    ) -> Result<String, SqlError> {
        let text = match v {
            Value::Literal(s) => s.clone(),
            Value::Param(n) => {
                let s = self.required(*n, what)?;
                dialect::validate_json(s).map_err(|e| parse_error(e).with_position(None))?;
                s.to_string()
            }
        };
        if text.len() > max_bytes {
            return Err(SqlError::error(
                SqlState::PROGRAM_LIMIT_EXCEEDED,
                format!(
                    "{what} of {} bytes exceeds the limit of {max_bytes} bytes",
                    text.len()
                ),
            ));
        }
        Ok(text)
    }

    /// A KV namespace (charset checked).
    pub fn namespace(&self, v: &Value<String>) -> Result<String, SqlError> {
        let s = self.text(v, "namespace")?;
        dialect::validate_namespace(&s).map_err(|e| parse_error(e).with_position(None))?;
        Ok(s)
    }

    /// A KV key (1–1024 bytes, no NUL).
    pub fn kv_key(&self, v: &Value<String>) -> Result<String, SqlError> {
        let s = self.text(v, "key")?;
        dialect::validate_kv_key(&s).map_err(|e| parse_error(e).with_position(None))?;
        Ok(s)
    }

    pub fn integer(&self, v: &Value<i64>, what: &str) -> Result<i64, SqlError> {
        match v {
            Value::Literal(i) => Ok(*i),
            Value::Param(n) => {
                dialect::parse_integer(self.required(*n, what)?).map_err(parse_error)
            }
        }
    }

    pub fn count(&self, v: &Value<u32>, what: &str) -> Result<u32, SqlError> {
        match v {
            Value::Literal(c) => Ok(*c),
            Value::Param(n) => {
                dialect::parse_count(what, self.required(*n, what)?).map_err(parse_error)
            }
        }
    }

    pub fn duration(&self, v: &Value<Duration>, what: &str) -> Result<Duration, SqlError> {
        match v {
            Value::Literal(d) => Ok(*d),
            Value::Param(n) => {
                dialect::parse_duration(self.required(*n, what)?).map_err(parse_error)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_apply_the_parsers_checks() {
        let values = vec![
            Some("{bad".to_string()),
            None,
            Some("x".repeat(300)),
            Some("5s".into()),
        ];
        let p = Params(&values);
        assert_eq!(
            p.json(&Value::Param(1), "payload", 100).unwrap_err().code(),
            "22P02"
        );
        assert_eq!(
            p.name(&Value::Param(2), "queue").unwrap_err().code(),
            "22004"
        );
        assert_eq!(
            p.name(&Value::Param(3), "queue").unwrap_err().code(),
            "22023"
        );
        assert_eq!(
            p.duration(&Value::Param(4), "wait").unwrap(),
            Duration::from_secs(5)
        );
        assert_eq!(p.text(&Value::Param(9), "x").unwrap_err().code(), "42P02");
        let big = vec![Some(format!("\"{}\"", "a".repeat(200)))];
        assert_eq!(
            Params(&big)
                .json(&Value::Param(1), "payload", 100)
                .unwrap_err()
                .code(),
            "54000"
        );
    }
}
