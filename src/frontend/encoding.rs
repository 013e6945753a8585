//! Reading clients' text in their encoding. Plain SQL is forwarded as the
//! client's bytes, whatever its `client_encoding`; the proxy only needs to
//! see the words that tell a dialect statement and the session effects,
//! which are ASCII in every client encoding PostgreSQL offers. So text
//! that is not UTF-8 is viewed as Latin-1 — one char per byte, so a range
//! of the view is the same range of the bytes — and a dialect statement is
//! read only where that view is exact: UTF-8 text of a UTF8 (or
//! SQL_ASCII) client, any text of a LATIN1 client, ASCII of any client.
//!
//! Two things would make the proxy's scanners find a literal's end where
//! PostgreSQL does not, and the view hides both (same length, so ranges
//! still map to the bytes): a backslash that is the second byte of a
//! character in SJIS, BIG5, GBK, UHC, GB18030 or JOHAB (PostgreSQL reads
//! the text in the server's encoding, where it is no backslash), and, with
//! `standard_conforming_strings` off, a backslash escaping a quote inside
//! `'…'`.

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
        match canonical(name).as_str() {
            "UTF8" | "UNICODE" => ClientEncoding::Utf8,
            "SQLASCII" => ClientEncoding::SqlAscii,
            "LATIN1" | "ISO88591" => ClientEncoding::Latin1,
            _ => ClientEncoding::Other(name.to_string()),
        }
    }

    /// The encodings PostgreSQL offers only to clients, whose characters'
    /// second byte can be from 0x40 up (a backslash among them).
    fn multibyte(&self) -> Option<Multibyte> {
        let ClientEncoding::Other(name) = self else {
            return None;
        };
        match canonical(name).as_str() {
            "SJIS" | "SHIFTJIS2004" => Some(Multibyte::Sjis),
            "BIG5" | "GBK" | "UHC" | "GB18030" | "JOHAB" => Some(Multibyte::LeadFromHigh),
            _ => None,
        }
    }
}

/// An encoding's name without case or punctuation (`Shift_JIS_2004` is
/// `SHIFTJIS2004`).
fn canonical(name: &str) -> String {
    name.chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .map(|c| c.to_ascii_uppercase())
        .collect()
}

/// Where a character of a client-only encoding starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Multibyte {
    /// SJIS: 0xA1–0xDF are characters alone; other high bytes lead two.
    Sjis,
    /// BIG5, GBK, UHC, GB18030, JOHAB: every high byte leads a character
    /// (GB18030's of four bytes have a digit second).
    LeadFromHigh,
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
    /// The view differs from the bytes where they are ASCII (see the
    /// module's comment).
    masked: bool,
    /// Where, in the view, a backslash escapes inside a `'…'` literal
    /// (`standard_conforming_strings` off).
    plain_escapes: Vec<usize>,
}

impl<'a> ClientText<'a> {
    /// `standard_strings`: the session's `standard_conforming_strings`.
    pub fn read(
        bytes: &'a [u8],
        encoding: &ClientEncoding,
        standard_strings: bool,
    ) -> ClientText<'a> {
        let utf8 = std::str::from_utf8(bytes).ok();
        let (view, exact, latin1) = match (encoding, utf8) {
            (ClientEncoding::Utf8 | ClientEncoding::SqlAscii, Some(text)) => {
                (Cow::Borrowed(text), true, false)
            }
            (_, Some(text)) if text.is_ascii() => (Cow::Borrowed(text), true, false),
            _ => {
                let view = match encoding.multibyte() {
                    Some(kind) => view_without_trail_backslashes(bytes, kind),
                    None => bytes.iter().map(|&b| char::from(b)).collect(),
                };
                (Cow::Owned(view), *encoding == ClientEncoding::Latin1, true)
            }
        };
        let mut text = ClientText {
            bytes,
            view,
            exact,
            latin1,
            masked: false,
            plain_escapes: Vec::new(),
        };
        if !standard_strings && text.view.contains('\\') {
            text.mask_plain_escapes();
        }
        text
    }

    /// Reads `'…'` as PostgreSQL does with `standard_conforming_strings`
    /// off: notes each escaping backslash, and turns each quote one escapes
    /// into a backslash, so that the standard rules end the literal where
    /// PostgreSQL does.
    fn mask_plain_escapes(&mut self) {
        let mut view = self.view.as_bytes().to_vec();
        for token in crate::rewrite::split::Tokens::with_plain_escapes(&self.view) {
            if view[token.range.start] != b'\'' {
                continue;
            }
            let mut i = token.range.start + 1;
            while i < token.range.end {
                if view[i] == b'\\' {
                    self.plain_escapes.push(i);
                    if view.get(i + 1) == Some(&b'\'') {
                        view[i + 1] = b'\\';
                    }
                    i += 2;
                } else {
                    i += 1;
                }
            }
        }
        if self.plain_escapes.is_empty() {
            return;
        }
        // Only ASCII bytes were replaced, by ASCII bytes.
        if let Ok(masked) = String::from_utf8(view) {
            self.view = Cow::Owned(masked);
            self.masked = true;
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

    /// Whether `statement`, a range of the view, can be read as a dialect
    /// statement, its encoding checked over `scope` (the statement, or the
    /// whole message where PostgreSQL checks the whole message); the error
    /// to answer otherwise.
    pub fn readable(
        &self,
        scope: Range<usize>,
        statement: Range<usize>,
        encoding: &ClientEncoding,
    ) -> Result<(), SqlError> {
        if let Some(&at) = self
            .plain_escapes
            .iter()
            .find(|&&at| statement.contains(&at))
        {
            let mut err = SqlError::error(
                SqlState::FEATURE_NOT_SUPPORTED,
                "queenwire statements read '…' literals by the standard rules: with standard_conforming_strings off, a backslash in one is read differently",
            );
            err.position = Some(self.view[..at].chars().count() + 1);
            err.hint = Some(
                "SET standard_conforming_strings TO on for queenwire statements, or write the literal as $$…$$".into(),
            );
            return Err(err);
        }
        if self.exact || self.view[scope].is_ascii() {
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
        self.masked || (self.latin1 && !self.bytes.is_ascii())
    }
}

/// The Latin-1 view of text in an encoding whose characters' second byte
/// can be a backslash, with such a backslash shown as another char: one
/// char per byte still.
fn view_without_trail_backslashes(bytes: &[u8], kind: Multibyte) -> String {
    let sjis = kind == Multibyte::Sjis;
    let mut view = String::with_capacity(bytes.len() * 2);
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        // Bytes of one character: SJIS's 0xA1–0xDF are characters alone.
        let width = match b {
            0x00..=0x7f => 1,
            0xa1..=0xdf if sjis => 1,
            0x80 | 0xff => 1,
            // GB18030's four-byte characters: a digit second.
            _ if bytes.get(i + 1).is_some_and(u8::is_ascii_digit) => 4,
            _ => 2,
        };
        for (k, &byte) in bytes[i..(i + width).min(bytes.len())].iter().enumerate() {
            view.push(if k > 0 && byte == b'\\' {
                char::from(byte | 0x80)
            } else {
                char::from(byte)
            });
        }
        i += width;
    }
    view
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latin_text_keeps_its_bytes_and_its_ranges() {
        let bytes = b"SELECT 'caf\xe9'; PUSH INTO q VALUES ('{\"a\":\"\xe9\"}')";
        let enc = ClientEncoding::from_name("LATIN9");
        let text = ClientText::read(bytes, &enc, true);
        let start = text.view.find("PUSH").unwrap();
        let end = text.view.len();
        assert_eq!(text.original(0..start), &bytes[..start - 1]);
        assert!(text.original(start..end).starts_with(b"PUSH INTO q"));
        assert_eq!(text.original(start..end).last(), Some(&b')'));
        assert!(text.readable(0..6, 0..6, &enc).is_ok());
        assert_eq!(
            text.readable(start..end, start..end, &enc)
                .unwrap_err()
                .code(),
            "22021"
        );
        let latin1 = ClientEncoding::from_name("ISO_8859_1");
        assert_eq!(latin1, ClientEncoding::Latin1);
        let text = ClientText::read(bytes, &latin1, true);
        assert!(text.readable(start..end, start..end, &latin1).is_ok());
        assert!(text.view.contains("caf\u{e9}"));
        assert!(text.is_transcoded());
    }

    #[test]
    fn utf8_text_is_read_as_it_is() {
        let enc = ClientEncoding::from_name("UTF8");
        let text = ClientText::read("SELECT 'é'".as_bytes(), &enc, true);
        assert!(!text.is_transcoded());
        assert_eq!(text.view, "SELECT 'é'");
        assert!(text
            .readable(0..text.view.len(), 0..text.view.len(), &enc)
            .is_ok());
    }

    #[test]
    fn the_view_ends_literals_where_postgresql_does() {
        use crate::rewrite::split::split_statements;
        // SJIS 表 (0x95 0x5C): its second byte is no backslash.
        let sjis = ClientEncoding::from_name("SJIS");
        let bytes = b"SELECT E'\x95\x5c'; SELECT 2";
        let text = ClientText::read(bytes, &sjis, true);
        assert_eq!(split_statements(&text.view).len(), 2);
        assert_eq!(text.view.chars().count(), bytes.len());
        // standard_conforming_strings off: `\'` does not end the literal.
        let bytes = b"SELECT 'a\\'; PUSH INTO q VALUES (''1'')'; SELECT 2";
        let utf8 = ClientEncoding::Utf8;
        let text = ClientText::read(bytes, &utf8, false);
        let statements = split_statements(&text.view);
        assert_eq!(&text.view[statements[1].clone()], "SELECT 2");
        assert!(text.is_transcoded());
        let all = 0..text.view.len();
        assert_eq!(
            text.readable(all.clone(), all, &utf8).unwrap_err().code(),
            "0A000"
        );
        let on = ClientText::read(bytes, &utf8, true);
        let statements = split_statements(&on.view);
        assert!(on.view[statements[1].clone()].starts_with("PUSH"));
    }
}
