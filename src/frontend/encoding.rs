//! Reading clients' text in their encoding. Plain SQL is forwarded as the
//! client's bytes, whatever its `client_encoding`; the proxy only needs to
//! see the words that tell a dialect statement and the session effects,
//! which are ASCII in every client encoding PostgreSQL offers. So text
//! that is not UTF-8 is viewed as Latin-1 — one char per byte, so a range
//! of the view is the same range of the bytes — and a dialect statement is
//! read only where that view is exact: UTF-8 text of a UTF8 (or
//! SQL_ASCII) client, any text of a LATIN1 client, ASCII of any client.

use crate::protocol::{SqlError, SqlState};
use std::borrow::Cow;
use std::ops::Range;

/// What the proxy knows of a client encoding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientEncoding {
    Utf8,
    SqlAscii,
    Latin1,
    /// Any other (LATIN9, WIN1252, EUC_JP, …), by PostgreSQL's name.
    Other(String),
}

impl ClientEncoding {
    /// From a `client_encoding` value as PostgreSQL reports it.
    pub fn from_name(name: &str) -> ClientEncoding {
        let canonical: String = name
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .map(|c| c.to_ascii_uppercase())
            .collect();
        match canonical.as_str() {
            "UTF8" | "UNICODE" => ClientEncoding::Utf8,
            "SQLASCII" => ClientEncoding::SqlAscii,
            "LATIN1" | "ISO88591" => ClientEncoding::Latin1,
            _ => ClientEncoding::Other(name.to_string()),
        }
    }
}

/// A client's text and the view the proxy reads it through.
pub struct ClientText<'a> {
    pub bytes: &'a [u8],
    /// The bytes as text: themselves when UTF-8 read as UTF-8, else
    /// Latin-1 (one char per byte).
    pub view: Cow<'a, str>,
    /// The view is the client's text exactly (not only its ASCII).
    exact: bool,
    latin1: bool,
}

impl<'a> ClientText<'a> {
    pub fn read(bytes: &'a [u8], encoding: &ClientEncoding) -> ClientText<'a> {
        let utf8 = std::str::from_utf8(bytes).ok();
        match (encoding, utf8) {
            (ClientEncoding::Utf8 | ClientEncoding::SqlAscii, Some(text)) => ClientText {
                bytes,
                view: Cow::Borrowed(text),
                exact: true,
                latin1: false,
            },
            (_, Some(text)) if text.is_ascii() => ClientText {
                bytes,
                view: Cow::Borrowed(text),
                exact: true,
                latin1: false,
            },
            _ => ClientText {
                bytes,
                view: Cow::Owned(bytes.iter().map(|&b| char::from(b)).collect()),
                exact: *encoding == ClientEncoding::Latin1,
                latin1: true,
            },
        }
    }

    /// The client's bytes of `range` of the view.
    pub fn original(&self, range: Range<usize>) -> &'a [u8] {
        if !self.latin1 {
            return &self.bytes[range];
        }
        let start = self.view[..range.start].chars().count();
        let len = self.view[range].chars().count();
        &self.bytes[start..start + len]
    }

    /// Whether `range` of the view can be read as a dialect statement; the
    /// error to answer otherwise.
    pub fn readable(&self, range: Range<usize>, encoding: &ClientEncoding) -> Result<(), SqlError> {
        if self.exact || self.view[range].is_ascii() {
            return Ok(());
        }
        let name = match encoding {
            ClientEncoding::Other(name) => name.as_str(),
            ClientEncoding::Utf8 => "UTF8 (the text is not valid UTF-8)",
            ClientEncoding::SqlAscii => "SQL_ASCII (the text is not valid UTF-8)",
            ClientEncoding::Latin1 => "LATIN1",
        };
        let mut err = SqlError::error(
            SqlState::CHARACTER_NOT_IN_REPERTOIRE,
            format!(
                "queenwire cannot read this statement's non-ASCII text in client encoding {name}"
            ),
        );
        err.hint = Some(
            "queenwire statements are read in UTF8 or LATIN1; use SET client_encoding TO 'UTF8' for them, or keep their text ASCII (plain SQL is passed on in any encoding)".into(),
        );
        Err(err)
    }

    /// The bytes differ from the view's UTF-8: a statement kept for later
    /// must keep them.
    pub fn is_transcoded(&self) -> bool {
        self.latin1 && !self.bytes.is_ascii()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latin_text_keeps_its_bytes_and_its_ranges() {
        let bytes = b"SELECT 'caf\xe9'; PUSH INTO q VALUES ('{\"a\":\"\xe9\"}')";
        let enc = ClientEncoding::from_name("LATIN9");
        let text = ClientText::read(bytes, &enc);
        let start = text.view.find("PUSH").unwrap();
        let end = text.view.len();
        assert_eq!(text.original(0..start), &bytes[..start - 1]);
        assert!(text.original(start..end).starts_with(b"PUSH INTO q"));
        assert_eq!(text.original(start..end).last(), Some(&b')'));
        assert!(text.readable(0..6, &enc).is_ok());
        assert_eq!(text.readable(start..end, &enc).unwrap_err().code(), "22021");
        let latin1 = ClientEncoding::from_name("ISO_8859_1");
        assert_eq!(latin1, ClientEncoding::Latin1);
        let text = ClientText::read(bytes, &latin1);
        assert!(text.readable(start..end, &latin1).is_ok());
        assert!(text.view.contains("caf\u{e9}"));
        assert!(text.is_transcoded());
    }

    #[test]
    fn utf8_text_is_read_as_it_is() {
        let enc = ClientEncoding::from_name("UTF8");
        let text = ClientText::read("SELECT 'é'".as_bytes(), &enc);
        assert!(!text.is_transcoded());
        assert_eq!(text.view, "SELECT 'é'");
        assert!(text.readable(0..text.view.len(), &enc).is_ok());
    }
}
