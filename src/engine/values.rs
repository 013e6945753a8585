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
    /// Microseconds since 2000-01-01 00:00 UTC, PostgreSQL's own count:
    /// its whole range fits, `i64::MAX` and `i64::MIN` being `infinity`
    /// and `-infinity`.
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
        t.map_or(Cell::Null, |t| Cell::Timestamptz(pg_micros(t)))
    }

    /// A timestamp the proxy keeps in microseconds since the Unix epoch.
    pub fn unix_micros(us: i64) -> Cell {
        Cell::Timestamptz(pg_from_unix_micros(us))
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
            Cell::Timestamptz(us) => out.put_i64(*us),
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

/// Microseconds since PostgreSQL's epoch of a time decoded from
/// PostgreSQL (which counts from 2000-01-01 in an `i64`, so the round trip
/// is exact, infinities included).
pub fn pg_micros(t: SystemTime) -> i64 {
    let unix: i128 = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_micros() as i128,
        Err(e) => -(e.duration().as_micros() as i128),
    };
    let pg = unix - i128::from(PG_EPOCH_OFFSET_MICROS);
    // Beyond PostgreSQL's range (which no value from it is) lies infinity.
    pg.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// Microseconds since PostgreSQL's epoch of microseconds since the Unix
/// epoch (the proxy's own clock readings, never near the ends of `i64`).
pub fn pg_from_unix_micros(us: i64) -> i64 {
    us.saturating_sub(PG_EPOCH_OFFSET_MICROS)
}

/// PostgreSQL's text output of a timestamptz (ISO DateStyle, UTC) from
/// microseconds since its epoch: `2026-11-30 03:43:13.123456+00`, years
/// past 9999 in full, years before 1 AD as `… BC`, `infinity` and
/// `-infinity` for the two ends.
pub fn format_timestamptz(pg_us: i64) -> String {
    match pg_us {
        i64::MAX => return "infinity".into(),
        i64::MIN => return "-infinity".into(),
        _ => {}
    }
    let secs = pg_us.div_euclid(1_000_000);
    let frac = pg_us.rem_euclid(1_000_000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days + DAYS_FROM_UNIX_TO_PG_EPOCH);
    // The proleptic Gregorian year 0 is 1 BC, -1 is 2 BC, …
    let (year, bc) = if y > 0 { (y, "") } else { (1 - y, " BC") };
    let mut s = format!(
        "{year:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    );
    if frac != 0 {
        let f = format!(".{frac:06}");
        s.push_str(f.trim_end_matches('0'));
    }
    s.push_str("+00");
    s.push_str(bc);
    s
}

/// 1970-01-01 to 2000-01-01.
const DAYS_FROM_UNIX_TO_PG_EPOCH: i64 = 10_957;

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

    /// Each pair as PostgreSQL 15 prints it (`SET TimeZone = 'UTC'`,
    /// `SELECT t::text, extract(epoch FROM t - '2000-01-01') * 1e6`).
    #[test]
    fn formats_timestamps_like_postgresql() {
        let printed: &[(i64, &str)] = &[
            (-PG_EPOCH_OFFSET_MICROS, "1970-01-01 00:00:00+00"),
            (753_315_200_123_400, "2023-11-14 22:13:20.1234+00"),
            (5_097_600_000_000, "2000-02-29 00:00:00+00"),
            (-PG_EPOCH_OFFSET_MICROS - 1, "1969-12-31 23:59:59.999999+00"),
            (0, "2000-01-01 00:00:00+00"),
            (-63_082_281_600_000_000, "0001-01-01 00:00:00+00"),
            (-63_082_281_600_000_001, "0001-12-31 23:59:59.999999+00 BC"),
            (-63_113_904_000_000_000, "0001-01-01 00:00:00+00 BC"),
            (-211_781_865_600_000_000, "4713-11-24 00:00:00+00 BC"),
            (252_455_529_600_000_000, "9999-12-31 00:00:00+00"),
            (252_455_616_000_000_000, "10000-01-01 00:00:00+00"),
            (9_223_371_331_199_999_999, "294276-12-31 23:59:59.999999+00"),
            (i64::MAX, "infinity"),
            (i64::MIN, "-infinity"),
        ];
        for (pg_us, text) in printed {
            assert_eq!(format_timestamptz(*pg_us), *text, "{pg_us}");
        }
    }

    #[test]
    fn times_from_postgresql_keep_their_value_at_both_ends() {
        // tokio-postgres decodes PostgreSQL's count onto 2000-01-01.
        let pg_epoch = UNIX_EPOCH + Duration::from_secs(946_684_800);
        let infinity = pg_epoch + Duration::from_micros(i64::MAX as u64);
        let minus_infinity = pg_epoch - Duration::from_micros(i64::MIN.unsigned_abs());
        assert_eq!(pg_micros(infinity), i64::MAX);
        assert_eq!(pg_micros(minus_infinity), i64::MIN);
        assert_eq!(pg_micros(pg_epoch), 0);
        assert_eq!(pg_micros(UNIX_EPOCH), -PG_EPOCH_OFFSET_MICROS);
        assert_eq!(Cell::timestamp(Some(infinity)), Cell::Timestamptz(i64::MAX));
    }

    #[test]
    fn binary_timestamps_count_from_2000() {
        let mut out = BytesMut::new();
        assert!(Cell::unix_micros(PG_EPOCH_OFFSET_MICROS).write_binary(&mut out));
        assert_eq!(&out[..], &[0; 8]);
    }
}
