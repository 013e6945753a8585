//! `--log-format`: the line format on standard error. `json` is
//! tracing-subscriber's (`main.rs`): one object a line with `timestamp`
//! (RFC 3339, UTC), `level`, the event's fields (`message` among them) and
//! `target`.

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_parse() {
        assert_eq!(LogFormat::parse("JSON"), Ok(LogFormat::Json));
        assert_eq!(LogFormat::parse("text"), Ok(LogFormat::Text));
        assert!(LogFormat::parse("xml").is_err());
    }
}
