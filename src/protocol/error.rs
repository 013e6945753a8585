//! Errors the proxy reports in PostgreSQL's own terms.

use super::backend::{build, put_cstr};
use super::framing::{BodyReader, Message};
use super::tags::backend as tag;
use bytes::BufMut;

pub use tokio_postgres::error::SqlState;

/// An error in PostgreSQL's terms: severity, SQLSTATE and the fields of an
/// ErrorResponse (one we produce, or one the backend sent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlError {
    pub severity: &'static str,
    pub state: SqlState,
    pub message: String,
    pub position: Option<usize>,
    pub detail: Option<String>,
    pub hint: Option<String>,
}

impl SqlError {
    pub fn error(state: SqlState, message: impl Into<String>) -> SqlError {
        SqlError {
            severity: "ERROR",
            state,
            message: message.into(),
            position: None,
            detail: None,
            hint: None,
        }
    }

    pub fn fatal(state: SqlState, message: impl Into<String>) -> SqlError {
        SqlError {
            severity: "FATAL",
            ..SqlError::error(state, message)
        }
    }

    /// The five-character SQLSTATE.
    pub fn code(&self) -> &str {
        self.state.code()
    }

    pub fn with_position(mut self, position: Option<usize>) -> SqlError {
        self.position = position;
        self
    }

    pub fn to_message(&self) -> Message {
        build(tag::ERROR_RESPONSE, |b| {
            b.put_u8(b'S');
            put_cstr(b, self.severity);
            b.put_u8(b'V');
            put_cstr(b, self.severity);
            b.put_u8(b'C');
            put_cstr(b, self.state.code());
            b.put_u8(b'M');
            put_cstr(b, &self.message);
            if let Some(d) = &self.detail {
                b.put_u8(b'D');
                put_cstr(b, d);
            }
            if let Some(h) = &self.hint {
                b.put_u8(b'H');
                put_cstr(b, h);
            }
            if let Some(p) = self.position {
                b.put_u8(b'P');
                put_cstr(b, &p.to_string());
            }
            b.put_u8(0);
        })
    }

    /// Decodes the fields of a backend ErrorResponse/NoticeResponse body.
    /// An ErrorResponse / NoticeResponse `body` with its position (`P`,
    /// characters from the start of the statement's text) moved `by`
    /// characters on: a statement run alone out of a longer text, whose
    /// client counts from the start of that text. `None`: no position.
    pub fn shift_position(body: &[u8], by: usize) -> Option<Vec<u8>> {
        let mut out = Vec::with_capacity(body.len() + 4);
        let mut shifted = false;
        let mut r = BodyReader::from_slice(body);
        while let Ok(kind) = r.u8() {
            if kind == 0 {
                break;
            }
            let value = r.cstr().ok()?;
            out.push(kind);
            match value.parse::<usize>() {
                Ok(at) if kind == b'P' => {
                    out.extend_from_slice((at + by).to_string().as_bytes());
                    shifted = true;
                }
                _ => out.extend_from_slice(value.as_bytes()),
            }
            out.push(0);
        }
        out.push(0);
        shifted.then_some(out)
    }

    /// Whether a backend message is an ErrorResponse after which PostgreSQL
    /// closes the connection (severity FATAL or PANIC).
    pub fn ends_connection(msg: &Message) -> bool {
        if msg.tag != tag::ERROR_RESPONSE {
            return false;
        }
        // `V` is never translated; `S` (which may be) only when `V` is absent.
        let fatal = |v: &str| v == "FATAL" || v == "PANIC";
        let mut localized = false;
        let mut r = BodyReader::from_slice(&msg.body);
        while let Ok(kind) = r.u8() {
            if kind == 0 {
                break;
            }
            let Ok(value) = r.cstr() else { break };
            match kind {
                b'V' => return fatal(value),
                b'S' => localized = fatal(value),
                _ => {}
            }
        }
        localized
    }

    pub fn parse(body: &[u8]) -> SqlError {
        let mut fields = SqlError::error(SqlState::INTERNAL_ERROR, "");
        let mut r = BodyReader::from_slice(body);
        while let Ok(kind) = r.u8() {
            if kind == 0 {
                break;
            }
            let Ok(value) = r.cstr() else { break };
            match kind {
                b'C' => fields.state = SqlState::from_code(value),
                b'M' => fields.message = value.to_string(),
                b'D' => fields.detail = Some(value.to_string()),
                b'H' => fields.hint = Some(value.to_string()),
                b'P' => fields.position = value.parse().ok(),
                b'V' if value == "FATAL" => fields.severity = "FATAL",
                _ => {}
            }
        }
        fields
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_position_moves_on_and_the_other_fields_stay() {
        let err = SqlError {
            position: Some(15),
            ..SqlError::error(SqlState::UNDEFINED_TABLE, "relation \"tt\" does not exist")
        };
        let body = err.to_message().body;
        let moved = SqlError::shift_position(&body, 12).expect("it has a position");
        let back = SqlError::parse(&moved);
        assert_eq!(back.position, Some(27));
        assert_eq!(back.code(), "42P01");
        assert_eq!(back.message, err.message);
        let none = SqlError::error(SqlState::UNDEFINED_TABLE, "x")
            .to_message()
            .body;
        assert_eq!(SqlError::shift_position(&none, 12), None);
    }
}
