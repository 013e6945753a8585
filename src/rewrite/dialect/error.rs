//! The one error type of the dialect parser, carrying the SQLSTATE the
//! frontend puts into its ErrorResponse.

/// SQLSTATE codes the parser produces (PostgreSQL's names, as constants so a
/// grep finds every place that raises one).
pub mod sqlstate {
    /// `syntax_error`: the statement does not follow the grammar.
    pub const SYNTAX_ERROR: &str = "42601";
    /// `invalid_parameter_value`: a bad option, name or value.
    pub const INVALID_PARAMETER_VALUE: &str = "22023";
    /// `invalid_text_representation`: bad JSON, duration or integer text.
    pub const INVALID_TEXT_REPRESENTATION: &str = "22P02";
    /// `untranslatable_character`: `\u0000` in JSON, as PostgreSQL's jsonb.
    pub const UNTRANSLATABLE_CHARACTER: &str = "22P05";
    /// `numeric_value_out_of_range`: an integer that does not fit a bigint.
    pub const NUMERIC_VALUE_OUT_OF_RANGE: &str = "22003";
    /// `datetime_field_overflow`: a duration too large to represent.
    pub const DATETIME_FIELD_OVERFLOW: &str = "22008";
    /// `program_limit_exceeded`: too many rows, too large a LIMIT, too deep JSON.
    pub const PROGRAM_LIMIT_EXCEEDED: &str = "54000";
    /// `undefined_parameter`: `$0`, or a parameter number beyond 65535.
    pub const UNDEFINED_PARAMETER: &str = "42P02";
    /// `duplicate_column`: a PUSH column list naming a column twice.
    pub const DUPLICATE_COLUMN: &str = "42701";
    /// `undefined_column`: a PUSH column list naming an unknown column.
    pub const UNDEFINED_COLUMN: &str = "42703";
}

/// A dialect statement that was recognised but is malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ParseError {
    /// One of the codes in [`sqlstate`].
    pub sqlstate: &'static str,
    /// One line: what was wrong and what was expected.
    pub message: String,
    /// 1-based character position in the statement text, like PostgreSQL's
    /// `P` field; `None` for errors about a value with no place in the text
    /// (for example a bound parameter checked by the engine).
    pub position: Option<usize>,
}

impl ParseError {
    pub(crate) fn new(sqlstate: &'static str, message: impl Into<String>) -> Self {
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
