//! Values crossing the engine's edges: bound parameters coming in (read
//! through [`Params`], which lives with the rewrite layer that binds `$n`)
//! and result cells going out (typed, encoded by the frontend in the format
//! the client asked for).

pub use crate::rewrite::bind::{parse_error, Params};
use bytes::{BufMut, BytesMut};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// One result cell.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    Null,
    Text(String),
    /// Text shared by many rows (a statement's queue name, a status), so
    /// a row does not copy it.
    Shared(Arc<str>),
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

    /// The text of a text cell, owned or shared.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Cell::Text(s) => Some(s),
            Cell::Shared(s) => Some(s),
            _ => None,
        }
    }

    pub fn timestamp(t: Option<SystemTime>) -> Cell {
        t.map_or(Cell::Null, |t| Cell::Timestamptz(micros(t)))
    }

    /// Appends PostgreSQL's text output (timestamps in UTC, ISO style);
    /// false for NULL, which has none.
    pub fn write_text(&self, out: &mut BytesMut) -> bool {
        match self {
            Cell::Null => return false,
            Cell::Text(s) | Cell::Jsonb(s) => out.extend_from_slice(s.as_bytes()),
            Cell::Shared(s) => out.extend_from_slice(s.as_bytes()),
            Cell::Int4(v) => out.extend_from_slice(itoa::Buffer::new().format(*v).as_bytes()),
            Cell::Int8(v) => out.extend_from_slice(itoa::Buffer::new().format(*v).as_bytes()),
            Cell::Bool(b) => out.extend_from_slice(if *b { b"t" } else { b"f" }),
            Cell::Uuid(u) => out.extend_from_slice(
                u.hyphenated()
                    .encode_lower(&mut uuid::Uuid::encode_buffer())
                    .as_bytes(),
            ),
            Cell::Timestamptz(us) => out.extend_from_slice(format_timestamptz(*us).as_bytes()),
        }
        true
    }

    /// Appends PostgreSQL's binary output; false for NULL.
    pub fn write_binary(&self, out: &mut BytesMut) -> bool {
        match self {
            Cell::Null => return false,
            Cell::Text(s) => out.extend_from_slice(s.as_bytes()),
            Cell::Shared(s) => out.extend_from_slice(s.as_bytes()),
            Cell::Jsonb(s) => {
                out.put_u8(1);
                out.extend_from_slice(s.as_bytes());
            }
            Cell::Int4(v) => out.put_i32(*v),
            Cell::Int8(v) => out.put_i64(*v),
            Cell::Bool(b) => out.put_u8(u8::from(*b)),
            Cell::Uuid(u) => out.extend_from_slice(u.as_bytes()),
            // PostgreSQL's epoch is 2000-01-01.
            Cell::Timestamptz(us) => out.put_i64(us - PG_EPOCH_OFFSET_MICROS),
        }
        true
    }
}

/// Microseconds from the Unix epoch to PostgreSQL's (2000-01-01).
pub(crate) const PG_EPOCH_OFFSET_MICROS: i64 = 946_684_800_000_000;

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
        let mut out = BytesMut::new();
        assert!(Cell::Timestamptz(PG_EPOCH_OFFSET_MICROS).write_binary(&mut out));
        assert_eq!(&out[..], &[0; 8]);
    }
}
