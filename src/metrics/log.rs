//! `--log-format json`: one JSON object per line on standard error, with
//! `timestamp` (RFC 3339, UTC), `level`, `target`, `message` and the
//! event's own fields beside them (a field named like one of those four
//! is prefixed `field.`). Hand-written on the crate's JSON writer rather
//! than through tracing-subscriber's `json` feature, which would bring
//! serde, serde_json and tracing-serde into the build (none of them is
//! built today) for this one format.

use crate::json::write_string;
use std::fmt::{self, Write};
use std::time::{SystemTime, UNIX_EPOCH};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The log line formats of `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

impl LogFormat {
    pub fn parse(value: &str) -> Result<LogFormat, String> {
        match value.to_ascii_lowercase().as_str() {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(format!("unknown log format {other:?}: text or json")),
        }
    }
}

/// The event's fields as `,"name":value` pairs, and its message.
#[derive(Default)]
struct Fields {
    message: Option<String>,
    rest: String,
}

impl Fields {
    fn key(&mut self, field: &Field) {
        let name = field.name();
        self.rest.push(',');
        if matches!(name, "timestamp" | "level" | "target" | "message") {
            write_string(&mut self.rest, &format!("field.{name}"));
        } else {
            write_string(&mut self.rest, name);
        }
        self.rest.push(':');
    }
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = Some(value.to_string());
            return;
        }
        self.key(field);
        write_string(&mut self.rest, value);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let text = format!("{value:?}");
        if field.name() == "message" {
            self.message = Some(text);
            return;
        }
        self.key(field);
        write_string(&mut self.rest, &text);
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.key(field);
        let _ = write!(self.rest, "{value}");
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.key(field);
        let _ = write!(self.rest, "{value}");
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.key(field);
        let _ = write!(self.rest, "{value}");
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.key(field);
        if value.is_finite() {
            let _ = write!(self.rest, "{value}");
        } else {
            write_string(&mut self.rest, &value.to_string());
        }
    }
}

/// RFC 3339 in UTC with microseconds, from the system clock.
pub fn rfc3339(now: SystemTime) -> String {
    let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        since.subsec_micros()
    )
}

/// The JSON line format for `tracing_subscriber::fmt().event_format(…)`.
pub struct JsonLines;

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let meta = event.metadata();
        let mut line = String::with_capacity(128 + fields.rest.len());
        line.push_str("{\"timestamp\":");
        write_string(&mut line, &rfc3339(SystemTime::now()));
        line.push_str(",\"level\":");
        write_string(&mut line, meta.level().as_str());
        line.push_str(",\"target\":");
        write_string(&mut line, meta.target());
        line.push_str(",\"message\":");
        write_string(&mut line, fields.message.as_deref().unwrap_or(""));
        line.push_str(&fields.rest);
        line.push('}');
        writeln!(writer, "{line}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339_utc() {
        let t = UNIX_EPOCH + std::time::Duration::from_micros(1_700_000_000_123_456);
        assert_eq!(rfc3339(t), "2023-11-14T22:13:20.123456Z");
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000000Z");
        let leap = UNIX_EPOCH + std::time::Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(rfc3339(leap), "2000-02-29T00:00:00.000000Z");
    }

    #[test]
    fn formats_parse() {
        assert_eq!(LogFormat::parse("JSON"), Ok(LogFormat::Json));
        assert_eq!(LogFormat::parse("text"), Ok(LogFormat::Text));
        assert!(LogFormat::parse("xml").is_err());
    }
}
