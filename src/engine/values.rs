//! Values crossing the engine's edges: bound parameters coming in (as text,
//! already converted from the client's formats by the frontend) and result
//! cells going out (typed, encoded by the frontend in the format the client
//! asked for).

use crate::protocol::ErrorFields;
use crate::rewrite::dialect::{self, ParseError, Value};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// One result cell.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    Null,
    Text(String),
    Int4(i32),
    Int8(i64),
    Bool(bool),
    Uuid(uuid::Uuid),
    /// JSON text.
    Jsonb(String),
    /// Microseconds since the Unix epoch.
    Timestamptz(i64),
}

impl Cell {
    pub fn opt_text(s: Option<String>) -> Cell {
        s.map_or(Cell::Null, Cell::Text)
    }

    pub fn timestamp(t: Option<SystemTime>) -> Cell {
        t.map_or(Cell::Null, |t| Cell::Timestamptz(micros(t)))
    }

    /// PostgreSQL's text output (timestamps in UTC, ISO style).
    pub fn to_text(&self) -> Option<String> {
        Some(match self {
            Cell::Null => return None,
            Cell::Text(s) | Cell::Jsonb(s) => s.clone(),
            Cell::Int4(v) => v.to_string(),
            Cell::Int8(v) => v.to_string(),
            Cell::Bool(b) => if *b { "t" } else { "f" }.to_string(),
            Cell::Uuid(u) => u.to_string(),
            Cell::Timestamptz(us) => format_timestamptz(*us),
        })
    }

    /// PostgreSQL's binary output.
    pub fn to_binary(&self) -> Option<Vec<u8>> {
        Some(match self {
            Cell::Null => return None,
            Cell::Text(s) => s.as_bytes().to_vec(),
            Cell::Jsonb(s) => {
                let mut v = Vec::with_capacity(s.len() + 1);
                v.push(1);
                v.extend_from_slice(s.as_bytes());
                v
            }
            Cell::Int4(v) => v.to_be_bytes().to_vec(),
            Cell::Int8(v) => v.to_be_bytes().to_vec(),
            Cell::Bool(b) => vec![u8::from(*b)],
            Cell::Uuid(u) => u.as_bytes().to_vec(),
            // PostgreSQL's epoch is 2000-01-01.
            Cell::Timestamptz(us) => (us - PG_EPOCH_OFFSET_MICROS).to_be_bytes().to_vec(),
        })
    }
}

const PG_EPOCH_OFFSET_MICROS: i64 = 946_684_800_000_000;

pub fn micros(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_micros() as i64,
        Err(e) => -(e.duration().as_micros() as i64),
    }
}

pub fn now_micros() -> i64 {
    micros(SystemTime::now())
}

pub fn system_time(us: i64) -> SystemTime {
    if us >= 0 {
        UNIX_EPOCH + Duration::from_micros(us as u64)
    } else {
        UNIX_EPOCH - Duration::from_micros(us.unsigned_abs())
    }
}

/// `2026-11-30 03:43:13.123456+00`
pub fn format_timestamptz(us: i64) -> String {
    let secs = us.div_euclid(1_000_000);
    let frac = us.rem_euclid(1_000_000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    let mut s = format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    );
    if frac != 0 {
        let f = format!(".{frac:06}");
        s.push_str(f.trim_end_matches('0'));
    }
    s.push_str("+00");
    s
}

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian
/// (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// A JSON string literal for `s`.
pub fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A row of a `queen.*` reader whose columns are, in order, the
/// statement's result columns: each cell decoded by the column's type.
pub fn row_cells(
    row: &crate::backend::conn::RawRow,
    columns: &[dialect::Column],
) -> Result<Vec<Cell>, crate::backend::BackendError> {
    use dialect::oid;
    use tokio_postgres::types::Type;
    columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            Ok(match c.type_oid {
                oid::INT8 => row
                    .get::<Option<i64>>(i, &Type::INT8)?
                    .map_or(Cell::Null, Cell::Int8),
                oid::INT4 => row
                    .get::<Option<i32>>(i, &Type::INT4)?
                    .map_or(Cell::Null, Cell::Int4),
                oid::BOOL => row
                    .get::<Option<bool>>(i, &Type::BOOL)?
                    .map_or(Cell::Null, Cell::Bool),
                oid::UUID => row
                    .get::<Option<uuid::Uuid>>(i, &Type::UUID)?
                    .map_or(Cell::Null, Cell::Uuid),
                oid::TIMESTAMPTZ => Cell::timestamp(row.get(i, &Type::TIMESTAMPTZ)?),
                oid::JSONB => row.jsonb(i)?.map_or(Cell::Null, Cell::Jsonb),
                _ => Cell::opt_text(row.get(i, &Type::TEXT)?),
            })
        })
        .collect()
}

/// The bound parameters of one execution, as text (`None` = NULL).
pub struct Params<'a>(pub &'a [Option<String>]);

pub fn parse_error(e: ParseError) -> ErrorFields {
    ErrorFields::error(e.sqlstate, e.message).with_position(e.position)
}

impl Params<'_> {
    fn get(&self, n: usize) -> Result<Option<&str>, ErrorFields> {
        match n.checked_sub(1).and_then(|i| self.0.get(i)) {
            Some(v) => Ok(v.as_deref()),
            None => Err(ErrorFields::error(
                "08P01",
                format!("there is no parameter ${n}"),
            )),
        }
    }

    fn required(&self, n: usize, what: &str) -> Result<&str, ErrorFields> {
        self.get(n)?
            .ok_or_else(|| ErrorFields::error("22004", format!("{what} (${n}) must not be NULL")))
    }

    /// A queue, partition or group name.
    pub fn name(&self, v: &Value<String>, what: &str) -> Result<String, ErrorFields> {
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
    pub fn opt_text(&self, v: &Value<String>) -> Result<Option<String>, ErrorFields> {
        match v {
            Value::Literal(s) => Ok(Some(s.clone())),
            Value::Param(n) => Ok(self.get(*n)?.map(str::to_string)),
        }
    }

    pub fn text(&self, v: &Value<String>, what: &str) -> Result<String, ErrorFields> {
        match v {
            Value::Literal(s) => Ok(s.clone()),
            Value::Param(n) => Ok(self.required(*n, what)?.to_string()),
        }
    }

    /// JSON text, checked, at most `max_bytes`.
    pub fn json(
        &self,
        v: &Value<String>,
        what: &str,
        max_bytes: usize,
    ) -> Result<String, ErrorFields> {
        let text = match v {
            Value::Literal(s) => s.clone(),
            Value::Param(n) => {
                let s = self.required(*n, what)?;
                dialect::validate_json(s).map_err(|e| parse_error(e).with_position(None))?;
                s.to_string()
            }
        };
        if text.len() > max_bytes {
            return Err(ErrorFields::error(
                "54000",
                format!(
                    "{what} of {} bytes exceeds the limit of {max_bytes} bytes",
                    text.len()
                ),
            ));
        }
        Ok(text)
    }

    /// A KV namespace (charset checked).
    pub fn namespace(&self, v: &Value<String>) -> Result<String, ErrorFields> {
        let s = self.text(v, "namespace")?;
        dialect::validate_namespace(&s).map_err(|e| parse_error(e).with_position(None))?;
        Ok(s)
    }

    /// A KV key (1–1024 bytes, no NUL).
    pub fn kv_key(&self, v: &Value<String>) -> Result<String, ErrorFields> {
        let s = self.text(v, "key")?;
        dialect::validate_kv_key(&s).map_err(|e| parse_error(e).with_position(None))?;
        Ok(s)
    }

    pub fn integer(&self, v: &Value<i64>, what: &str) -> Result<i64, ErrorFields> {
        match v {
            Value::Literal(i) => Ok(*i),
            Value::Param(n) => {
                dialect::parse_integer(self.required(*n, what)?).map_err(parse_error)
            }
        }
    }

    pub fn count(&self, v: &Value<u32>, what: &str) -> Result<u32, ErrorFields> {
        match v {
            Value::Literal(c) => Ok(*c),
            Value::Param(n) => {
                dialect::parse_count(what, self.required(*n, what)?).map_err(parse_error)
            }
        }
    }

    pub fn duration(&self, v: &Value<Duration>, what: &str) -> Result<Duration, ErrorFields> {
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
    fn formats_timestamps_like_postgresql() {
        assert_eq!(format_timestamptz(0), "1970-01-01 00:00:00+00");
        assert_eq!(
            format_timestamptz(1_700_000_000_123_400),
            "2023-11-14 22:13:20.1234+00"
        );
        assert_eq!(
            format_timestamptz(951_782_400_000_000),
            "2000-02-29 00:00:00+00"
        );
        assert_eq!(format_timestamptz(-1), "1969-12-31 23:59:59.999999+00");
    }

    #[test]
    fn binary_timestamps_count_from_2000() {
        assert_eq!(
            Cell::Timestamptz(PG_EPOCH_OFFSET_MICROS).to_binary(),
            Some(vec![0; 8])
        );
    }

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
            p.json(&Value::Param(1), "payload", 100).unwrap_err().code,
            "22P02"
        );
        assert_eq!(p.name(&Value::Param(2), "queue").unwrap_err().code, "22004");
        assert_eq!(p.name(&Value::Param(3), "queue").unwrap_err().code, "22023");
        assert_eq!(
            p.duration(&Value::Param(4), "wait").unwrap(),
            Duration::from_secs(5)
        );
        assert_eq!(p.text(&Value::Param(9), "x").unwrap_err().code, "08P01");
        let big = vec![Some(format!("\"{}\"", "a".repeat(200)))];
        assert_eq!(
            Params(&big)
                .json(&Value::Param(1), "payload", 100)
                .unwrap_err()
                .code,
            "54000"
        );
    }
}
