//! The aggregates of a stream window and their state: exact decimal sums
//! (PostgreSQL's `numeric` text, added here without rounding), counts,
//! numeric and timestamptz min/max, avg kept as (sum, count), and
//! first/last as the JSON text PostgreSQL's `to_jsonb` gave. A state
//! serialises to the JSON object stored in `queen.stream_state.state`,
//! keyed by the aggregates' names, and back from the members' text.
//!
//! Two kinds are decided by PostgreSQL, not here: text min/max (compared
//! in the database's collation) and `reduce` (a user function). Their
//! inputs are kept as pending ([`AggState::is_pending`]) while the
//! cycle's events are assigned, and the runner resolves them all in one
//! call each before the windows are saved or emitted.

use crate::rewrite::dialect::stream::AggFn;
use std::cmp::Ordering;

/// A decimal number: `mantissa * 10^-scale`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dec {
    mantissa: i128,
    scale: u32,
}

/// Digits kept after the point in an average.
const AVG_SCALE: u32 = 16;

impl Dec {
    pub const ZERO: Dec = Dec {
        mantissa: 0,
        scale: 0,
    };

    /// PostgreSQL's numeric output (`-12.50`, `3`); also accepts JSON's
    /// exponent form. `None` for NaN, infinities or more than 38 digits.
    pub fn parse(text: &str) -> Option<Dec> {
        let text = text.trim();
        let (body, exp) = match text.find(['e', 'E']) {
            Some(at) => (&text[..at], text[at + 1..].parse::<i32>().ok()?),
            None => (text, 0),
        };
        let (negative, digits) = match body.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, body.strip_prefix('+').unwrap_or(body)),
        };
        let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
        if (int.is_empty() && frac.is_empty())
            || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit())
        {
            return None;
        }
        let mut mantissa: i128 = 0;
        for c in int.chars().chain(frac.chars()) {
            let digit = c.to_digit(10)?;
            mantissa = mantissa.checked_mul(10)?.checked_add(i128::from(digit))?;
        }
        let mut scale = i64::try_from(frac.len()).ok()? - i64::from(exp);
        while scale < 0 {
            mantissa = mantissa.checked_mul(10)?;
            scale += 1;
        }
        let scale = u32::try_from(scale).ok()?;
        Some(Dec {
            mantissa: if negative { -mantissa } else { mantissa },
            scale,
        })
    }

    fn rescaled(self, scale: u32) -> Option<i128> {
        let mut m = self.mantissa;
        for _ in self.scale..scale {
            m = m.checked_mul(10)?;
        }
        Some(m)
    }

    pub fn checked_add(self, other: Dec) -> Option<Dec> {
        let scale = self.scale.max(other.scale);
        Some(Dec {
            mantissa: self.rescaled(scale)?.checked_add(other.rescaled(scale)?)?,
            scale,
        })
    }

    pub fn cmp_value(self, other: Dec) -> Ordering {
        let scale = self.scale.max(other.scale);
        match (self.rescaled(scale), other.rescaled(scale)) {
            (Some(a), Some(b)) => a.cmp(&b),
            // Out of range only when one is enormous: compare as floats.
            _ => self
                .to_f64()
                .partial_cmp(&other.to_f64())
                .unwrap_or(Ordering::Equal),
        }
    }

    fn to_f64(self) -> f64 {
        self.mantissa as f64 / 10f64.powi(self.scale as i32)
    }

    /// `self / count`, rounded half away from zero to [`AVG_SCALE`] digits.
    pub fn average(self, count: i64) -> Option<Dec> {
        if count <= 0 {
            return None;
        }
        let scale = self.scale.max(AVG_SCALE);
        let m = self.rescaled(scale)?;
        let c = i128::from(count);
        let (q, r) = (m / c, m % c);
        let round = if 2 * r.abs() >= c { m.signum() } else { 0 };
        Some(
            Dec {
                mantissa: q + round,
                scale,
            }
            .trimmed(),
        )
    }

    /// Without trailing zeros after the point.
    fn trimmed(mut self) -> Dec {
        while self.scale > 0 && self.mantissa % 10 == 0 {
            self.mantissa /= 10;
            self.scale -= 1;
        }
        self
    }
}

impl std::fmt::Display for Dec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let digits = self.mantissa.unsigned_abs().to_string();
        let sign = if self.mantissa < 0 { "-" } else { "" };
        let scale = self.scale as usize;
        if scale == 0 {
            return write!(f, "{sign}{digits}");
        }
        let padded = format!("{digits:0>width$}", width = scale + 1);
        let (int, frac) = padded.split_at(padded.len() - scale);
        write!(f, "{sign}{int}.{frac}")
    }
}

/// The state of one aggregate of one window.
#[derive(Debug, Clone, PartialEq)]
pub enum AggState {
    Count(i64),
    Sum(Option<Dec>),
    Min(Option<Dec>),
    Max(Option<Dec>),
    Avg(Dec, i64),
    /// The JSON text of the first value seen (`None`: no event yet).
    First(Option<String>),
    Last(Option<String>),
    /// Text min/max: the best JSON string so far and the candidates not
    /// compared yet (PostgreSQL compares them, [`AggState::resolve`]).
    Text {
        max: bool,
        best: Option<String>,
        pending: Vec<String>,
    },
    /// Timestamptz min/max, microseconds since the epoch.
    Time {
        max: bool,
        best: Option<i64>,
    },
    /// `reduce`: the state's JSON text (`None`: the initial state) and the
    /// payloads not folded into it yet, in order.
    Reduce {
        state: Option<String>,
        pending: Vec<String>,
    },
}

/// Why a value could not be aggregated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct AggError(pub String);

impl AggState {
    pub fn new(func: AggFn) -> AggState {
        match func {
            AggFn::Count => AggState::Count(0),
            AggFn::Sum => AggState::Sum(None),
            AggFn::Min => AggState::Min(None),
            AggFn::Max => AggState::Max(None),
            AggFn::Avg => AggState::Avg(Dec::ZERO, 0),
            AggFn::First => AggState::First(None),
            AggFn::Last => AggState::Last(None),
            AggFn::MinText | AggFn::MaxText => AggState::Text {
                max: func == AggFn::MaxText,
                best: None,
                pending: Vec::new(),
            },
            AggFn::MinTime | AggFn::MaxTime => AggState::Time {
                max: func == AggFn::MaxTime,
                best: None,
            },
            AggFn::Reduce => AggState::Reduce {
                state: None,
                pending: Vec::new(),
            },
        }
    }

    /// Whether PostgreSQL must still decide this state (text min/max
    /// candidates, payloads to fold).
    pub fn is_pending(&self) -> bool {
        match self {
            AggState::Text { pending, .. } | AggState::Reduce { pending, .. } => {
                !pending.is_empty()
            }
            _ => false,
        }
    }

    /// The value PostgreSQL decided for a pending state: the least or
    /// greatest candidate (text), the folded state (reduce).
    pub fn resolve(&mut self, value: String) {
        match self {
            AggState::Text { best, pending, .. } => {
                *best = Some(value);
                pending.clear();
            }
            AggState::Reduce { state, pending } => {
                *state = Some(value);
                pending.clear();
            }
            _ => {}
        }
    }

    /// One event's argument value: the text `stream_eval_v1` gave (`None`
    /// is SQL NULL, skipped; first/last always get JSON text).
    pub fn add(&mut self, value: Option<&str>) -> Result<(), AggError> {
        let number = |v: &str| {
            Dec::parse(v)
                .ok_or_else(|| AggError(format!("{v} is not a finite number of at most 38 digits")))
        };
        let overflow = || AggError("a sum outgrew 38 digits".into());
        match self {
            AggState::Count(n) => {
                // The evaluation gives '1' for count(*) and for a non-NULL
                // count(e), NULL otherwise.
                if value.is_some() {
                    *n += 1;
                }
            }
            AggState::Sum(sum) => {
                if let Some(v) = value {
                    let v = number(v)?;
                    *sum = Some(match sum {
                        Some(s) => s.checked_add(v).ok_or_else(overflow)?,
                        None => v,
                    });
                }
            }
            AggState::Min(m) => {
                if let Some(v) = value {
                    let v = number(v)?;
                    if m.is_none_or(|old| v.cmp_value(old) == Ordering::Less) {
                        *m = Some(v);
                    }
                }
            }
            AggState::Max(m) => {
                if let Some(v) = value {
                    let v = number(v)?;
                    if m.is_none_or(|old| v.cmp_value(old) == Ordering::Greater) {
                        *m = Some(v);
                    }
                }
            }
            AggState::Avg(sum, count) => {
                if let Some(v) = value {
                    *sum = sum.checked_add(number(v)?).ok_or_else(overflow)?;
                    *count += 1;
                }
            }
            AggState::First(first) => {
                if first.is_none() {
                    *first = Some(value.unwrap_or("null").to_string());
                }
            }
            AggState::Last(last) => *last = Some(value.unwrap_or("null").to_string()),
            AggState::Text { pending, .. } | AggState::Reduce { pending, .. } => {
                if let Some(v) = value {
                    pending.push(v.to_string());
                }
            }
            AggState::Time { max, best } => {
                if let Some(v) = value {
                    let v: i64 = v
                        .trim()
                        .parse()
                        .map_err(|_| AggError(format!("{v} is not a time in microseconds")))?;
                    let better = |old: i64| if *max { v > old } else { v < old };
                    if best.is_none_or(better) {
                        *best = Some(v);
                    }
                }
            }
        }
        Ok(())
    }

    /// Folds `later` (a window that began later) into `self`.
    pub fn merge(&mut self, later: &AggState) -> Result<(), AggError> {
        let overflow = || AggError("a sum outgrew 38 digits".into());
        match (self, later) {
            (AggState::Count(a), AggState::Count(b)) => *a += b,
            (AggState::Sum(a), AggState::Sum(b)) => {
                *a = match (*a, *b) {
                    (Some(x), Some(y)) => Some(x.checked_add(y).ok_or_else(overflow)?),
                    (x, y) => x.or(y),
                }
            }
            (AggState::Min(a), AggState::Min(Some(b)))
                if a.is_none_or(|x| b.cmp_value(x) == Ordering::Less) =>
            {
                *a = Some(*b)
            }
            (AggState::Max(a), AggState::Max(Some(b)))
                if a.is_none_or(|x| b.cmp_value(x) == Ordering::Greater) =>
            {
                *a = Some(*b)
            }
            (AggState::Avg(s, c), AggState::Avg(s2, c2)) => {
                *s = s.checked_add(*s2).ok_or_else(overflow)?;
                *c += c2;
            }
            (AggState::First(a), AggState::First(b)) if a.is_none() => a.clone_from(b),
            (AggState::Last(a), AggState::Last(b)) if b.is_some() => a.clone_from(b),
            (
                AggState::Text { pending, .. },
                AggState::Text {
                    best, pending: p2, ..
                },
            ) => {
                pending.extend(best.iter().cloned());
                pending.extend(p2.iter().cloned());
            }
            (AggState::Time { max, best }, AggState::Time { best: Some(b), .. })
                if best.is_none_or(|x| if *max { *b > x } else { *b < x }) =>
            {
                *best = Some(*b)
            }
            // Refused at CREATE: a reduce has no merge, and sessions merge.
            (AggState::Reduce { .. }, _) => {
                return Err(AggError("reduce cannot merge two session windows".into()))
            }
            _ => {}
        }
        Ok(())
    }

    /// The member's JSON in the stored state.
    pub fn stored(&self) -> String {
        match self {
            AggState::Count(n) => n.to_string(),
            AggState::Sum(v) | AggState::Min(v) | AggState::Max(v) => {
                v.map_or("null".to_string(), |d| d.to_string())
            }
            AggState::Avg(s, c) => format!("[{s}, {c}]"),
            // Wrapped, so a first value that is JSON null survives a reload.
            AggState::First(v) | AggState::Last(v) | AggState::Reduce { state: v, .. } => {
                v.as_ref().map_or("null".to_string(), |j| format!("[{j}]"))
            }
            AggState::Text { best, .. } => best.clone().unwrap_or_else(|| "null".into()),
            AggState::Time { best, .. } => best.map_or("null".to_string(), |t| t.to_string()),
        }
    }

    /// The member's JSON in the emitted window.
    pub fn emitted(&self) -> String {
        match self {
            AggState::Avg(s, c) => s.average(*c).map_or("null".to_string(), |d| d.to_string()),
            AggState::First(v) | AggState::Last(v) | AggState::Reduce { state: v, .. } => {
                v.clone().unwrap_or_else(|| "null".into())
            }
            AggState::Time { best, .. } => best.map_or("null".to_string(), |t| {
                use crate::engine::values::{format_timestamptz, pg_from_unix_micros};
                crate::json::string(&format_timestamptz(pg_from_unix_micros(t)))
            }),
            other => other.stored(),
        }
    }

    /// Back from [`AggState::stored`]'s text (`None`: the member is absent,
    /// the state starts empty).
    pub fn load(func: AggFn, text: Option<&str>) -> Result<AggState, AggError> {
        let bad = |t: &str| AggError(format!("stored state {t} does not fit {}", func.name()));
        let Some(text) = text.map(str::trim).filter(|t| *t != "null") else {
            return Ok(AggState::new(func));
        };
        let number = || Dec::parse(text).ok_or_else(|| bad(text));
        Ok(match func {
            AggFn::Count => AggState::Count(text.parse().map_err(|_| bad(text))?),
            AggFn::Sum => AggState::Sum(Some(number()?)),
            AggFn::Min => AggState::Min(Some(number()?)),
            AggFn::Max => AggState::Max(Some(number()?)),
            AggFn::Avg => {
                let inner = text
                    .strip_prefix('[')
                    .and_then(|t| t.strip_suffix(']'))
                    .ok_or_else(|| bad(text))?;
                let (s, c) = inner.split_once(',').ok_or_else(|| bad(text))?;
                AggState::Avg(
                    Dec::parse(s).ok_or_else(|| bad(text))?,
                    c.trim().parse().map_err(|_| bad(text))?,
                )
            }
            AggFn::First | AggFn::Last | AggFn::Reduce => {
                let inner = text
                    .strip_prefix('[')
                    .and_then(|t| t.strip_suffix(']'))
                    .ok_or_else(|| bad(text))?
                    .trim()
                    .to_string();
                match func {
                    AggFn::First => AggState::First(Some(inner)),
                    AggFn::Last => AggState::Last(Some(inner)),
                    _ => AggState::Reduce {
                        state: Some(inner),
                        pending: Vec::new(),
                    },
                }
            }
            AggFn::MinText | AggFn::MaxText => {
                if !text.starts_with('"') {
                    return Err(bad(text));
                }
                AggState::Text {
                    max: func == AggFn::MaxText,
                    best: Some(text.to_string()),
                    pending: Vec::new(),
                }
            }
            AggFn::MinTime | AggFn::MaxTime => AggState::Time {
                max: func == AggFn::MaxTime,
                best: Some(text.parse().map_err(|_| bad(text))?),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_add_exactly_and_print_as_postgresql_does() {
        let a = Dec::parse("12.50").unwrap();
        let b = Dec::parse("-0.125").unwrap();
        assert_eq!(a.checked_add(b).unwrap().to_string(), "12.375");
        assert_eq!(Dec::parse("-3").unwrap().to_string(), "-3");
        assert_eq!(Dec::parse("1e2").unwrap().to_string(), "100");
        assert_eq!(Dec::parse("0.5").unwrap().to_string(), "0.5");
        assert!(Dec::parse("NaN").is_none());
        assert!(Dec::parse("").is_none());
        assert_eq!(
            Dec::parse("10").unwrap().average(4).unwrap().to_string(),
            "2.5"
        );
        assert_eq!(
            Dec::parse("1").unwrap().average(3).unwrap().to_string(),
            "0.3333333333333333"
        );
    }

    #[test]
    fn states_round_trip_through_their_stored_text() {
        let funcs = [
            AggFn::Count,
            AggFn::Sum,
            AggFn::Min,
            AggFn::Max,
            AggFn::Avg,
            AggFn::First,
            AggFn::Last,
            AggFn::MinTime,
            AggFn::MaxTime,
            AggFn::MinText,
            AggFn::Reduce,
        ];
        for func in funcs {
            let mut s = AggState::new(func);
            let arg = match func {
                AggFn::First | AggFn::Last => ["null", "{\"a\": [1, 2]}"],
                AggFn::MinTime | AggFn::MaxTime => ["1764583200000000", "-5"],
                AggFn::MinText => ["\"b\"", "\"a\""],
                AggFn::Reduce => ["{\"id\": 1}", "{\"id\": 2}"],
                _ => ["2.5", "-7"],
            };
            s.add(Some(arg[0])).unwrap();
            s.add(Some(arg[1])).unwrap();
            if s.is_pending() {
                s.resolve(arg[1].to_string());
                assert!(!s.is_pending());
            }
            let back = AggState::load(func, Some(&s.stored())).unwrap();
            assert_eq!(back, s, "{func:?}");
        }
        let mut min = AggState::new(AggFn::Min);
        min.add(Some("3")).unwrap();
        min.add(Some("-1.5")).unwrap();
        min.add(None).unwrap();
        assert_eq!(min.emitted(), "-1.5");
        let mut first = AggState::new(AggFn::First);
        first.add(Some("null")).unwrap();
        first.add(Some("2")).unwrap();
        assert_eq!(first.emitted(), "null");
        let mut latest = AggState::new(AggFn::MaxTime);
        latest.add(Some("1764583200500000")).unwrap();
        latest.add(Some("0")).unwrap();
        assert_eq!(latest.emitted(), "\"2025-12-01 10:00:00.5+00\"");
        assert_eq!(latest.stored(), "1764583200500000");
        let mut folded = AggState::new(AggFn::Reduce);
        folded.add(Some("{}")).unwrap();
        folded.resolve("null".into());
        assert_eq!(folded.stored(), "[null]");
        assert_eq!(folded.emitted(), "null");
        assert_eq!(
            AggState::load(AggFn::Reduce, Some("[null]")).unwrap(),
            folded
        );
    }

    #[test]
    fn merging_keeps_the_earlier_first_and_the_later_last() {
        let mut a = AggState::new(AggFn::Last);
        a.add(Some("1")).unwrap();
        let mut b = AggState::new(AggFn::Last);
        b.add(Some("2")).unwrap();
        a.merge(&b).unwrap();
        assert_eq!(a.emitted(), "2");
        let mut s = AggState::Sum(Some(Dec::parse("1.1").unwrap()));
        s.merge(&AggState::Sum(Some(Dec::parse("2").unwrap())))
            .unwrap();
        assert_eq!(s.emitted(), "3.1");
    }

    #[test]
    fn merged_text_and_time_extremes_keep_every_candidate_and_a_reduce_refuses() {
        let mut a = AggState::new(AggFn::MaxText);
        a.add(Some("\"pear\"")).unwrap();
        a.resolve("\"pear\"".into());
        let mut b = AggState::new(AggFn::MaxText);
        b.add(Some("\"fig\"")).unwrap();
        a.merge(&b).unwrap();
        // PostgreSQL decides between them (resolve), not this code.
        assert_eq!(
            a,
            AggState::Text {
                max: true,
                best: Some("\"pear\"".into()),
                pending: vec!["\"fig\"".into()],
            }
        );
        let mut t = AggState::new(AggFn::MinTime);
        t.add(Some("5")).unwrap();
        let mut u = AggState::new(AggFn::MinTime);
        u.add(Some("-3")).unwrap();
        t.merge(&u).unwrap();
        assert_eq!(t.stored(), "-3");
        let mut r = AggState::new(AggFn::Reduce);
        assert!(r.merge(&AggState::new(AggFn::Reduce)).is_err());
    }
}
