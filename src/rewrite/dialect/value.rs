//! Values as written in a statement: a literal, already checked, or a `$n`
//! the engine resolves from the bound parameters with the same checks
//! (the validators here are public for that reason).

use super::error::{quoted, ParseError, SqlState};
use super::{oid, Oid};

/// A literal written in the statement, or parameter `$n` (n ≥ 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value<T> {
    Literal(T),
    Param(usize),
}

impl<T> Value<T> {
    pub fn literal(&self) -> Option<&T> {
        match self {
            Value::Literal(value) => Some(value),
            Value::Param(_) => None,
        }
    }

    pub fn param(&self) -> Option<usize> {
        match self {
            Value::Literal(_) => None,
            Value::Param(n) => Some(*n),
        }
    }
}

/// A queue, partition, group or timer key name (see [`validate_name`]), or a
/// KV namespace or key (see [`validate_namespace`], [`validate_kv_key`]).
pub type Name = Value<String>;
/// JSON text, kept as written; a literal has passed [`super::validate_json`].
pub type Json = Value<String>;
/// Text PostgreSQL reads as `timestamptz` in the session's TimeZone; the
/// parser does not interpret it.
pub type Timestamp = Value<String>;

/// The most rows in one PUSH, receipts in one ACK/RENEW, keys in one KV GET,
/// and the largest LIMIT/PARTITIONS.
pub const MAX_BATCH: u32 = 10_000;
pub const MAX_NAME_BYTES: usize = 255;
pub const MAX_NAMESPACE_BYTES: usize = 128;
pub const MAX_KV_KEY_BYTES: usize = 1024;

/// Queue, partition, group and timer-key names: 1–255 bytes, no control
/// characters. `what` names the thing in the message ("queue", "partition").
pub fn validate_name(what: &str, name: &str) -> Result<(), ParseError> {
    if name.is_empty() || name.len() > MAX_NAME_BYTES {
        return Err(ParseError::new(
            SqlState::INVALID_PARAMETER_VALUE,
            format!(
                "invalid {what} name {}: expected 1 to {MAX_NAME_BYTES} bytes, got {}",
                quoted(name),
                name.len()
            ),
        ));
    }
    if name.chars().any(char::is_control) {
        return Err(ParseError::new(
            SqlState::INVALID_PARAMETER_VALUE,
            format!(
                "invalid {what} name {}: control characters are not allowed",
                quoted(name)
            ),
        ));
    }
    Ok(())
}

/// KV namespaces: 1–128 bytes of `A-Z a-z 0-9 _ . : -`, so a typo is an
/// error rather than a phantom namespace.
pub fn validate_namespace(namespace: &str) -> Result<(), ParseError> {
    let allowed =
        |byte: u8| byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'.' | b':' | b'-');
    if namespace.is_empty()
        || namespace.len() > MAX_NAMESPACE_BYTES
        || !namespace.bytes().all(allowed)
    {
        return Err(ParseError::new(
            SqlState::INVALID_PARAMETER_VALUE,
            format!(
                "invalid KV namespace {}: expected 1 to {MAX_NAMESPACE_BYTES} characters of A-Z a-z 0-9 _ . : -",
                quoted(namespace)
            ),
        ));
    }
    Ok(())
}

/// KV keys: 1–1024 bytes of UTF-8 without NUL.
pub fn validate_kv_key(key: &str) -> Result<(), ParseError> {
    if key.is_empty() || key.len() > MAX_KV_KEY_BYTES || key.contains('\0') {
        return Err(ParseError::new(
            SqlState::INVALID_PARAMETER_VALUE,
            format!(
                "invalid KV key {}: expected 1 to {MAX_KV_KEY_BYTES} bytes without NUL",
                quoted(key)
            ),
        ));
    }
    Ok(())
}

/// A KV LIST `PREFIX` or `AFTER` bound: like a key, but may be empty.
pub fn validate_kv_bound(what: &str, bound: &str) -> Result<(), ParseError> {
    if bound.len() > MAX_KV_KEY_BYTES || bound.contains('\0') {
        return Err(ParseError::new(
            SqlState::INVALID_PARAMETER_VALUE,
            format!(
                "invalid {what} {}: expected at most {MAX_KV_KEY_BYTES} bytes without NUL",
                quoted(bound)
            ),
        ));
    }
    Ok(())
}

/// Integer text as PostgreSQL's `int8` input reads it.
pub fn parse_integer(text: &str) -> Result<i64, ParseError> {
    let trimmed = text.trim();
    trimmed.parse::<i64>().map_err(|_| {
        let digits = trimmed.strip_prefix(['-', '+']).unwrap_or(trimmed);
        if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
            ParseError::new(
                SqlState::NUMERIC_VALUE_OUT_OF_RANGE,
                format!("value {} is out of range for type bigint", quoted(trimmed)),
            )
        } else {
            ParseError::new(
                SqlState::INVALID_TEXT_REPRESENTATION,
                format!("invalid input syntax for type integer: {}", quoted(text)),
            )
        }
    })
}

/// A LIMIT or PARTITIONS count: 1..=10000 (below is `22023`, above `54000`).
pub fn check_count(what: &str, count: i64) -> Result<u32, ParseError> {
    match u32::try_from(count) {
        Ok(count) if (1..=MAX_BATCH).contains(&count) => Ok(count),
        _ => Err(count_out_of_range(what, count < 1, count)),
    }
}

/// A count's refusal, `got` as the client wrote it.
fn count_out_of_range(what: &str, below: bool, got: impl std::fmt::Display) -> ParseError {
    if below {
        ParseError::new(
            SqlState::INVALID_PARAMETER_VALUE,
            format!("{what} must be at least 1, got {got}"),
        )
    } else {
        ParseError::new(
            SqlState::PROGRAM_LIMIT_EXCEEDED,
            format!("{what} must be at most {MAX_BATCH}, got {got}"),
        )
    }
}

/// Count text (a literal or a bound parameter's text) checked as [`check_count`].
pub fn parse_count(what: &str, text: &str) -> Result<u32, ParseError> {
    match parse_integer(text) {
        Ok(count) => check_count(what, count),
        // Digits too long for a bigint are certainly out of range; the
        // error quotes them as written.
        Err(err) if err.sqlstate == SqlState::NUMERIC_VALUE_OUT_OF_RANGE => {
            let text = text.trim();
            Err(count_out_of_range(what, text.starts_with('-'), text))
        }
        Err(err) => Err(err),
    }
}

/// `true/false/on/off`, and the other spellings PostgreSQL's boolean input
/// accepts whole (`yes/no/t/f/1/0`); case-insensitive.
pub fn parse_bool(text: &str) -> Option<bool> {
    let text = text.trim();
    const TRUE: [&str; 5] = ["true", "on", "yes", "t", "1"];
    const FALSE: [&str; 5] = ["false", "off", "no", "f", "0"];
    if TRUE.iter().any(|word| word.eq_ignore_ascii_case(text)) {
        Some(true)
    } else if FALSE.iter().any(|word| word.eq_ignore_ascii_case(text)) {
        Some(false)
    } else {
        None
    }
}

/// The types Describe reports for parameters the client left unspecified:
/// the first use of `$n`, in statement order, decides.
#[derive(Debug, Default)]
pub(crate) struct ParamTypes {
    // Index n-1; 0 until `$n` is seen.
    types: Vec<Oid>,
}

impl ParamTypes {
    pub fn note<T>(&mut self, value: &Value<T>, type_oid: Oid) {
        let Value::Param(n) = value else { return };
        let n = *n;
        if n == 0 {
            return;
        }
        if self.types.len() < n {
            self.types.resize(n, 0);
        }
        if let Some(slot) = self.types.get_mut(n - 1) {
            if *slot == 0 {
                *slot = type_oid;
            }
        }
    }

    pub fn note_all<'v, T: 'v>(
        &mut self,
        values: impl IntoIterator<Item = &'v Value<T>>,
        type_oid: Oid,
    ) {
        for value in values {
            self.note(value, type_oid);
        }
    }

    /// Index i holds the type of `$(i+1)`; a number the statement skips is `text`.
    pub fn into_vec(self) -> Vec<Oid> {
        self.types
            .into_iter()
            .map(|type_oid| if type_oid == 0 { oid::TEXT } else { type_oid })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_one_to_255_bytes_without_control_characters() {
        assert!(validate_name("queue", "orders-eu").is_ok());
        assert!(validate_name("queue", &"x".repeat(255)).is_ok());
        for bad in ["", &"x".repeat(256), "a\tb", "a\u{7f}b"] {
            assert_eq!(
                validate_name("queue", bad).unwrap_err().sqlstate.code(),
                "22023",
                "{bad:?}"
            );
        }
    }

    #[test]
    fn namespaces_allow_only_their_charset() {
        assert!(validate_namespace("app.v1:cache-x_y").is_ok());
        for bad in ["", "a b", "é", "a/b", &"n".repeat(129)] {
            assert_eq!(
                validate_namespace(bad).unwrap_err().sqlstate.code(),
                "22023",
                "{bad:?}"
            );
        }
    }

    #[test]
    fn kv_keys_are_one_to_1024_bytes_without_nul() {
        assert!(validate_kv_key("user:1 with spaces é").is_ok());
        for bad in ["", "a\0b", &"k".repeat(1025)] {
            assert_eq!(validate_kv_key(bad).unwrap_err().sqlstate.code(), "22023");
        }
        assert!(validate_kv_bound("PREFIX", "").is_ok());
    }

    #[test]
    fn counts() {
        assert_eq!(parse_count("LIMIT", "10000"), Ok(10_000));
        assert_eq!(parse_count("LIMIT", " 7 "), Ok(7));
        assert_eq!(
            parse_count("LIMIT", "0").unwrap_err().sqlstate.code(),
            "22023"
        );
        assert_eq!(
            parse_count("LIMIT", "-3").unwrap_err().sqlstate.code(),
            "22023"
        );
        assert_eq!(
            parse_count("LIMIT", "10001").unwrap_err().sqlstate.code(),
            "54000"
        );
        assert_eq!(
            parse_count("LIMIT", "99999999999999999999")
                .unwrap_err()
                .sqlstate
                .code(),
            "54000"
        );
        assert_eq!(
            parse_count("LIMIT", "1.5").unwrap_err().sqlstate.code(),
            "22P02"
        );
        // Past a bigint the error quotes the digits as written.
        let err = parse_count("LIMIT", "99999999999999999999").unwrap_err();
        assert_eq!(
            err.message,
            "LIMIT must be at most 10000, got 99999999999999999999"
        );
        let err = parse_count("PARTITIONS", "-99999999999999999999").unwrap_err();
        assert_eq!(err.sqlstate.code(), "22023");
        assert_eq!(
            err.message,
            "PARTITIONS must be at least 1, got -99999999999999999999"
        );
        assert_eq!(
            check_count("LIMIT", 10_001).unwrap_err().message,
            "LIMIT must be at most 10000, got 10001"
        );
    }

    #[test]
    fn integers() {
        assert_eq!(parse_integer("-42"), Ok(-42));
        assert_eq!(parse_integer("x").unwrap_err().sqlstate.code(), "22P02");
        assert_eq!(
            parse_integer("99999999999999999999")
                .unwrap_err()
                .sqlstate
                .code(),
            "22003"
        );
    }

    #[test]
    fn booleans() {
        assert_eq!(parse_bool("ON"), Some(true));
        assert_eq!(parse_bool("off"), Some(false));
        assert_eq!(parse_bool("maybe"), None);
    }

    #[test]
    fn first_use_of_a_parameter_decides_its_type() {
        let mut params = ParamTypes::default();
        params.note(&Value::<String>::Param(3), oid::JSONB);
        params.note(&Value::<String>::Param(3), oid::TEXT);
        params.note(&Value::Literal(1), oid::INT4);
        assert_eq!(params.into_vec(), vec![oid::TEXT, oid::TEXT, oid::JSONB]);
    }
}
