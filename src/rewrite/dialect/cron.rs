//! Five-field cron expressions (`minute hour day-of-month month
//! day-of-week`) for `SCHEDULE … CRON`, parsed here into the normalised
//! form `queen.timer_cron_next_v1` computes the next occurrence from (in
//! the timer's time zone, by PostgreSQL, so no time zone database is
//! needed here).
//!
//! Each field is `*` or a comma list of `n`, `a-b`, `*/s`, `a-b/s` or
//! `a/s` (from a to the field's end); months take `JAN`–`DEC`, days of
//! the week `SUN`–`SAT` (0 and 7 are Sunday). `@hourly`, `@daily`
//! (`@midnight`), `@weekly`, `@monthly`, `@yearly` (`@annually`) stand for
//! their usual expressions. As in Vixie cron, when both day fields are
//! restricted (neither starts with `*`) a day matches if either does.

/// The fields' bounds, in order.
const FIELDS: [(&str, u32, u32); 5] = [
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day of month", 1, 31),
    ("month", 1, 12),
    ("day of week", 0, 7),
];

const MONTHS: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const DAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/// The normalised expression: per field `*` (every value) or the sorted
/// values, fields joined by `|`, e.g. `0,30|*|*|*|1,2,3,4,5`; a day field
/// written as `*/s` is its values after a `*` (`*1,11,21,31`): it matches
/// those days but does not make the either-day rule apply.
pub fn normalise(expr: &str) -> Result<String, String> {
    let expr = expr.trim();
    let expanded = match expr.to_ascii_lowercase().as_str() {
        "@hourly" => "0 * * * *",
        "@daily" | "@midnight" => "0 0 * * *",
        "@weekly" => "0 0 * * 0",
        "@monthly" => "0 0 1 * *",
        "@yearly" | "@annually" => "0 0 1 1 *",
        other if other.starts_with('@') => {
            return Err(format!("unknown cron shorthand \"{expr}\""))
        }
        _ => expr,
    };
    let fields: Vec<&str> = expanded.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(format!(
            "a cron expression has 5 fields (minute hour day-of-month month day-of-week), \"{expr}\" has {}",
            fields.len()
        ));
    }
    let mut out = Vec::with_capacity(5);
    for (i, field) in fields.iter().enumerate() {
        let (what, lo, hi) = FIELDS[i];
        let mut values = field_values(field, i, lo, hi)
            .map_err(|e| format!("cron {what} field \"{field}\": {e}"))?;
        if i == 4 {
            // 7 is Sunday too.
            for v in values.iter_mut() {
                if *v == 7 {
                    *v = 0;
                }
            }
        }
        values.sort_unstable();
        values.dedup();
        let list = values
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",");
        out.push(match *field {
            "*" => "*".to_string(),
            // A day field written from `*` (`*/10`) still counts as
            // unrestricted for the either-day rule, as in Vixie cron.
            f if (i == 2 || i == 4) && f.starts_with('*') => format!("*{list}"),
            _ => list,
        });
    }
    Ok(out.join("|"))
}

fn field_values(field: &str, index: usize, lo: u32, hi: u32) -> Result<Vec<u32>, String> {
    let mut values = Vec::new();
    for part in field.split(',') {
        if part.is_empty() {
            return Err("an empty list item".into());
        }
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => {
                let step: u32 = s
                    .parse()
                    .map_err(|_| format!("step \"{s}\" is not a number"))?;
                if step == 0 {
                    return Err("a step of 0".into());
                }
                (r, Some(step))
            }
            None => (part, None),
        };
        let (from, to) = if range == "*" {
            (lo, hi)
        } else if let Some((a, b)) = range.split_once('-') {
            (value(a, index, lo, hi)?, value(b, index, lo, hi)?)
        } else {
            let v = value(range, index, lo, hi)?;
            // `a/s` runs from a to the field's end.
            (v, if step.is_some() { hi } else { v })
        };
        if from > to {
            return Err(format!("range {from}-{to} runs backwards"));
        }
        let mut v = from;
        while v <= to {
            values.push(v);
            v += step.unwrap_or(1);
        }
    }
    Ok(values)
}

fn value(text: &str, index: usize, lo: u32, hi: u32) -> Result<u32, String> {
    let named = |names: &[&str], first: u32| {
        names
            .iter()
            .position(|n| n.eq_ignore_ascii_case(text))
            .map(|p| p as u32 + first)
    };
    let v = match index {
        3 => named(&MONTHS, 1),
        4 => named(&DAYS, 0),
        _ => None,
    };
    let v = match v {
        Some(v) => v,
        None => text
            .parse()
            .map_err(|_| format!("\"{text}\" is not a number"))?,
    };
    if v < lo || v > hi {
        return Err(format!("{v} is outside {lo}-{hi}"));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_expanded_and_sorted() {
        assert_eq!(normalise("*/15 * * * *").unwrap(), "0,15,30,45|*|*|*|*");
        assert_eq!(normalise("*/1 * * * *").unwrap().len(), 177);
        assert_eq!(
            normalise("0 9-17/4 * * MON-FRI").unwrap(),
            "0|9,13,17|*|*|1,2,3,4,5"
        );
        assert_eq!(normalise("30 2 1,15 jan,Jul 7").unwrap(), "30|2|1,15|1,7|0");
        assert_eq!(normalise("5/20 0 * * 0,7").unwrap(), "5,25,45|0|*|*|0");
        assert_eq!(normalise(" @daily ").unwrap(), "0|0|*|*|*");
        assert_eq!(normalise("0 0 */10 * *").unwrap(), "0|0|*1,11,21,31|*|*");
    }

    #[test]
    fn bad_expressions_say_what_is_wrong() {
        for (expr, says) in [
            ("* * * *", "5 fields"),
            ("60 * * * *", "outside 0-59"),
            ("* 24 * * *", "outside 0-23"),
            ("* * 0 * *", "outside 1-31"),
            ("* * * 13 *", "outside 1-12"),
            ("* * * * 8", "outside 0-7"),
            ("*/0 * * * *", "step of 0"),
            ("5-1 * * * *", "backwards"),
            ("x * * * *", "not a number"),
            ("1,,2 * * * *", "empty"),
            ("@often", "shorthand"),
        ] {
            let err = normalise(expr).unwrap_err();
            assert!(err.contains(says), "{expr}: {err}");
        }
    }
}
