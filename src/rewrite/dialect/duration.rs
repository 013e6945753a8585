//! Durations: `WAIT`, `LEASE`, `RENEW … FOR`, `AFTER`, `TTL` and the
//! duration options.
//!
//! Accepted text, all read here rather than by PostgreSQL so a duration is a
//! `std::time::Duration` at parse time (no round trip, and the same rules for
//! literals and bound parameters):
//! - a number: seconds (`30`, `1.5`);
//! - number-unit pairs, with or without spaces: `250ms`, `5s`, `2m`, `1h`,
//!   `7d`, `1h30m`, `1 minute 30 seconds`, `@ 2 hours`;
//! - PostgreSQL time fields: `00:01:30`, `01:30` (h:m), `1:30.5` (m:s.frac),
//!   `1 02:00:00` (a number before a time field is days);
//! - ISO 8601: `PT1M30S`, `P1DT2H`, `P1W`.
//!
//! Months and years have no fixed length; like PostgreSQL's
//! `extract(epoch from interval)` a month is 30 days and a year 365.25 days.
//! A negative total (`-5s`, `5 minutes ago`) is `22023`: no duration in the
//! dialect can run backwards. PostgreSQL's year-month form (`1-2`) is not
//! accepted.

use std::time::Duration;

use super::error::{quoted, ParseError, SqlState};

const NANOS_PER_SECOND: i128 = 1_000_000_000;
const MINUTE: i128 = 60 * NANOS_PER_SECOND;
const HOUR: i128 = 60 * MINUTE;
const DAY: i128 = 24 * HOUR;
const MONTH: i128 = 30 * DAY;
const YEAR: i128 = 31_557_600 * NANOS_PER_SECOND;

enum Failure {
    Syntax,
    Overflow,
}

type Nanos = Result<i128, Failure>;

fn unit_nanos(unit: &str) -> Result<i128, Failure> {
    let unit = unit.to_ascii_lowercase();
    let nanos = match unit.as_str() {
        "us" | "usec" | "usecs" | "microsecond" | "microseconds" => 1_000,
        "ms" | "msec" | "msecs" | "millisecond" | "milliseconds" => 1_000_000,
        "s" | "sec" | "secs" | "second" | "seconds" => NANOS_PER_SECOND,
        "m" | "min" | "mins" | "minute" | "minutes" => MINUTE,
        "h" | "hr" | "hrs" | "hour" | "hours" => HOUR,
        "d" | "day" | "days" => DAY,
        "w" | "week" | "weeks" => 7 * DAY,
        "mon" | "mons" | "month" | "months" => MONTH,
        "y" | "yr" | "yrs" | "year" | "years" => YEAR,
        "decade" | "decades" => 10 * YEAR,
        "century" | "centuries" => 100 * YEAR,
        "millennium" | "millennia" | "millenniums" => 1000 * YEAR,
        _ => return Err(Failure::Syntax),
    };
    Ok(nanos)
}

/// A decimal number as written: sign × mantissa / 10^scale.
struct Number {
    negative: bool,
    mantissa: i128,
    scale: u32,
}

impl Number {
    /// Reads `[+-]digits[.digits]` from the start of `text`; returns it and the rest.
    fn read(text: &str) -> Result<(Number, &str), Failure> {
        // Fraction digits past this many cannot change a nanosecond total.
        const MAX_SCALE: u32 = 18;
        let bytes = text.as_bytes();
        let mut at = 0;
        let negative = match bytes.first() {
            Some(b'-') => {
                at = 1;
                true
            }
            Some(b'+') => {
                at = 1;
                false
            }
            _ => false,
        };
        let mut mantissa: i128 = 0;
        let mut scale = 0u32;
        let mut digits = 0usize;
        let mut in_fraction = false;
        while let Some(&byte) = bytes.get(at) {
            match byte {
                b'0'..=b'9' => {
                    digits += 1;
                    if !in_fraction || scale < MAX_SCALE {
                        mantissa = mantissa
                            .checked_mul(10)
                            .and_then(|m| m.checked_add(i128::from(byte - b'0')))
                            .ok_or(Failure::Overflow)?;
                        if in_fraction {
                            scale += 1;
                        }
                    }
                }
                b'.' if !in_fraction => in_fraction = true,
                _ => break,
            }
            at += 1;
        }
        if digits == 0 {
            return Err(Failure::Syntax);
        }
        let rest = text.get(at..).ok_or(Failure::Syntax)?;
        Ok((
            Number {
                negative,
                mantissa,
                scale,
            },
            rest,
        ))
    }

    fn times(&self, unit: i128) -> Nanos {
        let whole = self.mantissa.checked_mul(unit).ok_or(Failure::Overflow)?;
        let nanos = whole / 10i128.pow(self.scale);
        Ok(if self.negative { -nanos } else { nanos })
    }

    fn is_integer(&self) -> bool {
        self.scale == 0
    }
}

fn add(total: i128, more: i128) -> Nanos {
    total.checked_add(more).ok_or(Failure::Overflow)
}

/// `[+-]h:m`, `[+-]h:m:s[.frac]` or `[+-]m:s.frac`.
fn time_field(field: &str) -> Nanos {
    let (negative, body) = match field.strip_prefix('-') {
        Some(body) => (true, body),
        None => (false, field.strip_prefix('+').unwrap_or(field)),
    };
    let parts: Vec<&str> = body.split(':').collect();
    let whole = |part: &str| -> Result<i128, Failure> {
        if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
            return Err(Failure::Syntax);
        }
        part.parse::<i128>().map_err(|_| Failure::Overflow)
    };
    let seconds = |part: &str| -> Nanos {
        let (number, rest) = Number::read(part)?;
        if !rest.is_empty() || number.negative || part.starts_with('+') {
            return Err(Failure::Syntax);
        }
        let nanos = number.times(NANOS_PER_SECOND)?;
        if nanos >= MINUTE {
            return Err(Failure::Syntax);
        }
        Ok(nanos)
    };
    let below_sixty = |value: i128| {
        if value < 60 {
            Ok(value)
        } else {
            Err(Failure::Syntax)
        }
    };
    let nanos = match parts.as_slice() {
        [minutes, secs] if secs.contains('.') => add(
            whole(minutes)?
                .checked_mul(MINUTE)
                .ok_or(Failure::Overflow)?,
            seconds(secs)?,
        )?,
        [hours, minutes] => add(
            whole(hours)?.checked_mul(HOUR).ok_or(Failure::Overflow)?,
            below_sixty(whole(minutes)?)? * MINUTE,
        )?,
        [hours, minutes, secs] => add(
            add(
                whole(hours)?.checked_mul(HOUR).ok_or(Failure::Overflow)?,
                below_sixty(whole(minutes)?)? * MINUTE,
            )?,
            seconds(secs)?,
        )?,
        _ => return Err(Failure::Syntax),
    };
    Ok(if negative { -nanos } else { nanos })
}

/// PostgreSQL's "postgres" interval style plus the dialect's `250ms` forms.
fn postgres_style(text: &str) -> Nanos {
    let body = text.strip_prefix('@').unwrap_or(text);
    let mut total: i128 = 0;
    let mut pending: Option<Number> = None;
    let mut ago = false;
    let mut components = 0usize;
    for field in body.split_whitespace() {
        if ago {
            // `ago` must be the last word.
            return Err(Failure::Syntax);
        }
        if field.eq_ignore_ascii_case("ago") {
            ago = true;
            continue;
        }
        if field.contains(':') {
            if let Some(days) = pending.take() {
                if !days.is_integer() {
                    return Err(Failure::Syntax);
                }
                total = add(total, days.times(DAY)?)?;
            }
            total = add(total, time_field(field)?)?;
            components += 1;
            continue;
        }
        let mut rest = field;
        while !rest.is_empty() {
            let letters = rest.bytes().take_while(|b| b.is_ascii_alphabetic()).count();
            if letters > 0 {
                let unit = rest.get(..letters).ok_or(Failure::Syntax)?;
                let number = pending.take().ok_or(Failure::Syntax)?;
                total = add(total, number.times(unit_nanos(unit)?)?)?;
                components += 1;
                rest = rest.get(letters..).ok_or(Failure::Syntax)?;
            } else {
                if pending.is_some() {
                    return Err(Failure::Syntax);
                }
                let (number, tail) = Number::read(rest)?;
                pending = Some(number);
                rest = tail;
            }
        }
    }
    if let Some(seconds) = pending {
        total = add(total, seconds.times(NANOS_PER_SECOND)?)?;
        components += 1;
    }
    if components == 0 {
        return Err(Failure::Syntax);
    }
    if ago {
        total.checked_neg().ok_or(Failure::Overflow)
    } else {
        Ok(total)
    }
}

/// ISO 8601 durations, `P[nY][nM][nW][nD][T[nH][nM][nS]]`, text after the `P`.
fn iso_8601(text: &str) -> Nanos {
    let mut total: i128 = 0;
    let mut in_time = false;
    let mut components = 0;
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(tail) = rest.strip_prefix(['T', 't']) {
            if in_time {
                return Err(Failure::Syntax);
            }
            in_time = true;
            rest = tail;
            continue;
        }
        let (number, tail) = Number::read(rest)?;
        let mut chars = tail.chars();
        let designator = chars.next().ok_or(Failure::Syntax)?.to_ascii_uppercase();
        let unit = match (in_time, designator) {
            (false, 'Y') => YEAR,
            (false, 'M') => MONTH,
            (false, 'W') => 7 * DAY,
            (false, 'D') => DAY,
            (true, 'H') => HOUR,
            (true, 'M') => MINUTE,
            (true, 'S') => NANOS_PER_SECOND,
            _ => return Err(Failure::Syntax),
        };
        total = add(total, number.times(unit)?)?;
        components += 1;
        rest = chars.as_str();
    }
    if components == 0 {
        return Err(Failure::Syntax);
    }
    Ok(total)
}

/// Reads a duration (see the module documentation for the forms). Errors
/// carry no position; the parser adds the token's.
pub fn parse_duration(text: &str) -> Result<Duration, ParseError> {
    let trimmed = text.trim();
    let parsed = match trimmed.strip_prefix(['P', 'p']) {
        Some(iso) => iso_8601(iso),
        None if trimmed.is_empty() => Err(Failure::Syntax),
        None => postgres_style(trimmed),
    };
    let nanos = match parsed {
        Ok(nanos) => nanos,
        Err(Failure::Syntax) => {
            return Err(ParseError::new(
                SqlState::INVALID_TEXT_REPRESENTATION,
                format!(
                    "invalid input syntax for type interval: {} (expected seconds, '250ms', '5s', '2m', '1h', '7d' or an interval such as '1 minute 30 seconds')",
                    quoted(text)
                ),
            ))
        }
        Err(Failure::Overflow) => return Err(out_of_range(text)),
    };
    if nanos < 0 {
        return Err(ParseError::new(
            SqlState::INVALID_PARAMETER_VALUE,
            format!("duration must not be negative: {}", quoted(text)),
        ));
    }
    // PostgreSQL's interval ends at i64::MAX microseconds (about 292,000
    // years); past it is its 22008, and a deadline that far would overflow
    // the clock.
    if nanos / 1_000 > i128::from(i64::MAX) {
        return Err(out_of_range(text));
    }
    let seconds = u64::try_from(nanos / NANOS_PER_SECOND).map_err(|_| out_of_range(text))?;
    let subsec = u32::try_from(nanos % NANOS_PER_SECOND).map_err(|_| out_of_range(text))?;
    Ok(Duration::new(seconds, subsec))
}

fn out_of_range(text: &str) -> ParseError {
    ParseError::new(
        SqlState::DATETIME_FIELD_OVERFLOW,
        format!("duration out of range: {}", quoted(text)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(text: &str) -> f64 {
        parse_duration(text)
            .unwrap_or_else(|err| panic!("{text}: {err}"))
            .as_secs_f64()
    }

    #[test]
    fn plain_numbers_are_seconds() {
        assert_eq!(secs("30"), 30.0);
        assert_eq!(secs(" 0 "), 0.0);
        assert_eq!(secs("1.5"), 1.5);
        assert_eq!(secs("+2"), 2.0);
    }

    #[test]
    fn short_units() {
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(secs("5s"), 5.0);
        assert_eq!(secs("2m"), 120.0);
        assert_eq!(secs("1h"), 3600.0);
        assert_eq!(secs("7d"), 7.0 * 86_400.0);
        assert_eq!(secs("1h30m"), 5400.0);
        assert_eq!(secs("1.5h"), 5400.0);
        assert_eq!(parse_duration("10us").unwrap(), Duration::from_micros(10));
    }

    #[test]
    fn postgres_interval_words() {
        assert_eq!(secs("1 minute 30 seconds"), 90.0);
        assert_eq!(secs("@ 2 hours"), 7200.0);
        assert_eq!(secs("1 day 2 hours"), 93_600.0);
        assert_eq!(secs("1 week"), 604_800.0);
        assert_eq!(secs("1 mon"), 30.0 * 86_400.0);
        assert_eq!(secs("1 year"), 365.25 * 86_400.0);
        assert_eq!(secs("2 HOURS -30 minutes"), 5400.0);
        assert_eq!(secs("500 milliseconds"), 0.5);
    }

    #[test]
    fn postgres_time_fields() {
        assert_eq!(secs("00:01:30"), 90.0);
        assert_eq!(secs("01:30"), 5400.0);
        assert_eq!(secs("1:30.5"), 90.5);
        assert_eq!(secs("1 02:00:00"), 93_600.0);
        assert_eq!(secs("36:00:00"), 129_600.0);
        for bad in ["00:60:00", "00:00:60", "1:2:3:4", "a:b", "1:", "1 2"] {
            assert_eq!(
                parse_duration(bad).unwrap_err().sqlstate.code(),
                "22P02",
                "{bad}"
            );
        }
    }

    #[test]
    fn iso_8601() {
        assert_eq!(secs("PT1M30S"), 90.0);
        assert_eq!(secs("P1DT2H"), 93_600.0);
        assert_eq!(secs("p1w"), 604_800.0);
        assert_eq!(secs("PT0.25S"), 0.25);
        for bad in ["P", "PT", "P1H", "PT1D", "P1", "PTT1S"] {
            assert_eq!(
                parse_duration(bad).unwrap_err().sqlstate.code(),
                "22P02",
                "{bad}"
            );
        }
    }

    #[test]
    fn bad_text_is_22p02() {
        for bad in [
            "",
            "   ",
            "@",
            "ago",
            "abc",
            "5 parsecs",
            "ms",
            "1e5",
            "5 5",
            "1 ago ago",
            "--5",
        ] {
            assert_eq!(
                parse_duration(bad).unwrap_err().sqlstate.code(),
                "22P02",
                "{bad:?}"
            );
        }
    }

    #[test]
    fn negative_durations_are_22023() {
        for bad in ["-5", "-5s", "5 minutes ago", "-00:00:01", "PT-1S"] {
            assert_eq!(
                parse_duration(bad).unwrap_err().sqlstate.code(),
                "22023",
                "{bad}"
            );
        }
    }

    #[test]
    fn the_longest_interval_postgresql_holds_is_a_duration() {
        let longest = parse_duration("9223372036854 seconds").unwrap();
        assert_eq!(longest.as_secs(), 9_223_372_036_854);
        assert!(std::time::Instant::now().checked_add(longest).is_some());
    }

    #[test]
    fn huge_durations_are_out_of_range() {
        for bad in [
            "99999999999999999999999999999999999999999",
            "99999999999999 millennia",
            "9223372036854775807",
            "9223372036855 seconds",
            "300000 years",
        ] {
            assert_eq!(
                parse_duration(bad).unwrap_err().sqlstate.code(),
                "22008",
                "{bad}"
            );
        }
    }
}
