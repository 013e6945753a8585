//! The one error type of the dialect parser, carrying the SQLSTATE the
//! frontend puts into its ErrorResponse.

pub use tokio_postgres::error::SqlState;

/// A dialect statement that was recognised but is malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ParseError {
    /// PostgreSQL's SQLSTATE for it (syntax_error, invalid_parameter_value,
    /// invalid_text_representation, program_limit_exceeded, …).
    pub sqlstate: SqlState,
    /// One line: what was wrong and what was expected.
    pub message: String,
    /// 1-based character position in the statement text, like PostgreSQL's
    /// `P` field; `None` for errors about a value with no place in the text
    /// (for example a bound parameter checked by the engine).
    pub position: Option<usize>,
}

impl ParseError {
    pub(crate) fn new(sqlstate: SqlState, message: impl Into<String>) -> Self {
        ParseError {
            sqlstate,
            message: message.into(),
            position: None,
        }
    }

    pub(crate) fn at(mut self, position: usize) -> Self {
        self.position = Some(position);
        self
    }
}

/// Quotes user text for an error message, cut short so one bad megabyte of
/// payload does not become a megabyte of error.
pub(crate) fn quoted(text: &str) -> String {
    const MAX_CHARS: usize = 64;
    let mut shown = String::new();
    for c in text.chars().take(MAX_CHARS) {
        // Control characters escaped: the message stays one printable line.
        if c.is_control() {
            shown.extend(c.escape_default());
        } else {
            shown.push(c);
        }
    }
    if text.chars().nth(MAX_CHARS).is_some() {
        shown.push('…');
    }
    format!("\"{shown}\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_text_is_one_short_line() {
        assert_eq!(quoted("a\nb"), "\"a\\nb\"");
        assert_eq!(quoted(&"x".repeat(64)), format!("\"{}\"", "x".repeat(64)));
        assert_eq!(quoted(&"é".repeat(65)), format!("\"{}…\"", "é".repeat(64)));
    }
}
