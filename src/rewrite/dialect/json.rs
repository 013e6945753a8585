//! A JSON validator (RFC 8259, as PostgreSQL's `jsonb` input accepts it), so
//! a bad payload is rejected at parse time with the literal's position and
//! payloads stay as the text the client wrote.
//!
//! It is a loop over an explicit stack, never recursion, and bounds nesting
//! at [`MAX_JSON_DEPTH`]: 128 is serde_json's default recursion limit, so
//! any payload accepted here can be decoded by a typical Rust or JavaScript
//! consumer; PostgreSQL itself would accept deeper documents.

use super::error::{ParseError, SqlState};

pub const MAX_JSON_DEPTH: usize = 128;

/// PostgreSQL reads no exponent of this magnitude or more (`INT_MAX / 2`).
const NUMERIC_EXPONENT_LIMIT: i64 = 1_073_741_823;

/// Whether PostgreSQL's `numeric`, a `jsonb` number's type, holds the
/// number of integer digits `int`, fraction digits `frac` and `exponent`:
/// at most 131,072 digits before the decimal point (a weight of 32,767 in
/// base 10,000) and a scale — the fraction's digits as written, less the
/// exponent — of at most 16,383, zero included (`0.0e-99999` overflows).
fn numeric_holds(int: &[u8], frac: &[u8], exponent: i64) -> bool {
    let scale = (frac.len() as i64 - exponent).max(0);
    if scale > 16_383 {
        return false;
    }
    // The power of ten of the first non-zero digit.
    let leading = match int.iter().position(|&d| d != b'0') {
        Some(i) => (int.len() - i) as i64 - 1,
        None => match frac.iter().position(|&d| d != b'0') {
            Some(i) => -(i as i64) - 1,
            None => return true,
        },
    };
    leading + exponent <= 131_071
}

enum Container {
    Object,
    Array,
}

struct Scanner<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Scanner<'a> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn eat(&mut self, byte: u8) -> bool {
        if self.peek() == Some(byte) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn skip_whitespace(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn invalid(&self, what: &str) -> ParseError {
        let character = self.text.get(..self.pos).map_or(0, |s| s.chars().count()) + 1;
        let found = match self
            .text
            .get(self.pos..)
            .and_then(|rest| rest.chars().next())
        {
            Some(c) => format!("{what} at character {character} of the JSON text (found {c:?})"),
            None => format!("{what} at the end of the JSON text"),
        };
        ParseError::new(
            SqlState::INVALID_TEXT_REPRESENTATION,
            format!("invalid input syntax for type json: {found}"),
        )
    }

    fn expect(&mut self, byte: u8, what: &str) -> Result<(), ParseError> {
        if self.eat(byte) {
            Ok(())
        } else {
            Err(self.invalid(what))
        }
    }

    fn hex4(&mut self) -> Result<u32, ParseError> {
        let mut value = 0u32;
        for _ in 0..4 {
            let digit = self
                .peek()
                .and_then(|b| char::from(b).to_digit(16))
                .ok_or_else(|| self.invalid("expected four hexadecimal digits after \\u"))?;
            value = value * 16 + digit;
            self.pos += 1;
        }
        Ok(value)
    }

    fn string(&mut self) -> Result<(), ParseError> {
        self.expect(b'"', "expected a string")?;
        loop {
            match self.peek() {
                None => return Err(self.invalid("unterminated string")),
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(());
                }
                Some(b'\\') => {
                    self.pos += 1;
                    match self.peek() {
                        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => {
                            self.pos += 1
                        }
                        Some(b'u') => {
                            self.pos += 1;
                            self.unicode_escape()?;
                        }
                        _ => return Err(self.invalid("invalid escape sequence")),
                    }
                }
                Some(byte) if byte < 0x20 => {
                    return Err(self.invalid("control characters must be escaped in strings"))
                }
                Some(_) => self.pos += 1,
            }
        }
    }

    /// The four digits after `\u`, and the low surrogate a high one needs.
    fn unicode_escape(&mut self) -> Result<(), ParseError> {
        let unit = self.hex4()?;
        match unit {
            0 => Err(ParseError::new(
                SqlState::UNTRANSLATABLE_CHARACTER,
                "unsupported Unicode escape sequence: \\u0000 cannot be converted to text",
            )),
            0xD800..=0xDBFF => {
                if self.eat(b'\\') && self.eat(b'u') && (0xDC00..=0xDFFF).contains(&self.hex4()?) {
                    Ok(())
                } else {
                    Err(self.invalid("Unicode low surrogate must follow a high surrogate"))
                }
            }
            0xDC00..=0xDFFF => {
                Err(self.invalid("Unicode low surrogate must follow a high surrogate"))
            }
            _ => Ok(()),
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.pos;
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.pos += 1;
        }
        self.pos - start
    }

    fn number(&mut self) -> Result<(), ParseError> {
        let bytes = self.bytes;
        self.eat(b'-');
        let int_start = self.pos;
        if !self.eat(b'0') && self.digits() == 0 {
            return Err(self.invalid("expected a digit"));
        }
        let int = &bytes[int_start..self.pos];
        let mut frac: &[u8] = &[];
        if self.eat(b'.') {
            let frac_start = self.pos;
            if self.digits() == 0 {
                return Err(self.invalid("expected a digit after the decimal point"));
            }
            frac = &bytes[frac_start..self.pos];
        }
        let mut exponent = 0i64;
        if self.eat(b'e') || self.eat(b'E') {
            let negative = !self.eat(b'+') && self.eat(b'-');
            let digits_start = self.pos;
            if self.digits() == 0 {
                return Err(self.invalid("expected a digit in the exponent"));
            }
            // Saturated far beyond any exponent PostgreSQL reads.
            exponent = bytes[digits_start..self.pos].iter().fold(0i64, |e, d| {
                (e * 10 + i64::from(d - b'0')).min(1_000_000_000_000)
            });
            if negative {
                exponent = -exponent;
            }
        }
        if exponent.abs() >= NUMERIC_EXPONENT_LIMIT {
            return Err(self.invalid("exponent out of range"));
        }
        if !numeric_holds(int, frac, exponent) {
            return Err(ParseError::new(
                SqlState::NUMERIC_VALUE_OUT_OF_RANGE,
                "value overflows numeric format",
            ));
        }
        Ok(())
    }

    fn word(&mut self, word: &str) -> Result<(), ParseError> {
        if self.bytes.get(self.pos..self.pos + word.len()) == Some(word.as_bytes()) {
            self.pos += word.len();
            Ok(())
        } else {
            Err(self.invalid("expected a JSON value"))
        }
    }

    /// An object key and its colon.
    fn key(&mut self) -> Result<(), ParseError> {
        self.skip_whitespace();
        self.string()?;
        self.skip_whitespace();
        self.expect(b':', "expected \":\" after an object key")
    }
}

/// Checks that `text` is one JSON value. Errors: `22P02` (with the character
/// inside the JSON text in the message), `22P05` for `\u0000`, `54000` for
/// nesting deeper than [`MAX_JSON_DEPTH`]; no position (the parser adds the
/// literal's).
pub fn validate_json(text: &str) -> Result<(), ParseError> {
    let mut scanner = Scanner {
        text,
        bytes: text.as_bytes(),
        pos: 0,
    };
    let mut stack: Vec<Container> = Vec::new();
    loop {
        // Read one value; an opening bracket with content pushes its container
        // and loops back here for the first member.
        scanner.skip_whitespace();
        let opened = match scanner.peek() {
            Some(b'{') => Some(Container::Object),
            Some(b'[') => Some(Container::Array),
            Some(b'"') => {
                scanner.string()?;
                None
            }
            Some(b'-' | b'0'..=b'9') => {
                scanner.number()?;
                None
            }
            Some(b't') => {
                scanner.word("true")?;
                None
            }
            Some(b'f') => {
                scanner.word("false")?;
                None
            }
            Some(b'n') => {
                scanner.word("null")?;
                None
            }
            _ => return Err(scanner.invalid("expected a JSON value")),
        };
        if let Some(container) = opened {
            if stack.len() >= MAX_JSON_DEPTH {
                return Err(ParseError::new(
                    SqlState::PROGRAM_LIMIT_EXCEEDED,
                    format!("JSON nesting depth exceeds the limit of {MAX_JSON_DEPTH}"),
                ));
            }
            scanner.pos += 1;
            scanner.skip_whitespace();
            let close = match container {
                Container::Object => b'}',
                Container::Array => b']',
            };
            if !scanner.eat(close) {
                if matches!(container, Container::Object) {
                    scanner.key()?;
                }
                stack.push(container);
                continue;
            }
        }
        // A value is complete: close containers until one wants another member.
        loop {
            scanner.skip_whitespace();
            match stack.last() {
                None if scanner.peek().is_none() => return Ok(()),
                None => return Err(scanner.invalid("unexpected content after the JSON value")),
                Some(Container::Object) => {
                    if scanner.eat(b',') {
                        scanner.key()?;
                        break;
                    } else if scanner.eat(b'}') {
                        stack.pop();
                    } else {
                        return Err(scanner.invalid("expected \",\" or \"}\" in an object"));
                    }
                }
                Some(Container::Array) => {
                    if scanner.eat(b',') {
                        break;
                    } else if scanner.eat(b']') {
                        stack.pop();
                    } else {
                        return Err(scanner.invalid("expected \",\" or \"]\" in an array"));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_held_as_postgresql_s_numeric_holds_them() {
        // Each boundary as PostgreSQL 15's '…'::jsonb answers it.
        for held in [
            "1e131071",
            "12.5e131070",
            "1e-16383",
            "0e999999",
            "-0.5",
            "[1e131071, 9.99e-16381]",
        ] {
            assert!(validate_json(held).is_ok(), "{held}");
        }
        for overflows in [
            "1e131072",
            "-1e131072",
            "1e-16384",
            "1e-999999",
            "0.0e-99999",
        ] {
            let err = validate_json(overflows).unwrap_err();
            assert_eq!(
                err.sqlstate,
                SqlState::NUMERIC_VALUE_OUT_OF_RANGE,
                "{overflows}"
            );
        }
        assert!(validate_json("1e99999999999999999999").is_err());
    }

    #[test]
    fn accepts_any_json_value() {
        for good in [
            "null",
            " true ",
            "false",
            "0",
            "-1.5e+10",
            "2E-3",
            r#""a\"b\\c\/\b\f\n\r\t\u00e9\ud83d\ude00""#,
            "[]",
            "{}",
            "[1, [2, {}], {\"a\": [null]}]",
            "{\"a\":{\"b\":{\"c\":1}},\"d\":\"é\"}",
            "\n\t[ 1 ,2 ]\r\n",
        ] {
            assert_eq!(validate_json(good), Ok(()), "{good}");
        }
    }

    #[test]
    fn rejects_malformed_json_with_22p02() {
        for bad in [
            "",
            " ",
            "{",
            "[1,]",
            "{\"a\"}",
            "{\"a\":1,}",
            "{a:1}",
            "01",
            "1.",
            "-",
            ".5",
            "1e",
            "tru",
            "nul",
            "'x'",
            "\"abc",
            "\"a\tb\"",
            "\"\\x\"",
            "\"\\u12\"",
            "\"\\ud800\"",
            "\"\\udc00\"",
            "[1] [2]",
            "{} x",
            "NaN",
            "[1 2]",
        ] {
            assert_eq!(
                validate_json(bad).map_err(|e| e.sqlstate),
                Err(SqlState::INVALID_TEXT_REPRESENTATION),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn error_message_names_the_character() {
        let err = validate_json("{\"a\": x}").unwrap_err();
        assert!(err.message.contains("character 7"), "{}", err.message);
        assert!(err
            .message
            .starts_with("invalid input syntax for type json"));
    }

    #[test]
    fn nul_escape_is_untranslatable() {
        assert_eq!(
            validate_json("\"\\u0000\"").unwrap_err().sqlstate.code(),
            "22P05"
        );
    }

    #[test]
    fn nesting_is_bounded_without_recursion() {
        let ok = format!(
            "{}{}",
            "[".repeat(MAX_JSON_DEPTH),
            "]".repeat(MAX_JSON_DEPTH)
        );
        assert_eq!(validate_json(&ok), Ok(()));
        let deep = format!(
            "{}{}",
            "[".repeat(MAX_JSON_DEPTH + 1),
            "]".repeat(MAX_JSON_DEPTH + 1)
        );
        assert_eq!(validate_json(&deep).unwrap_err().sqlstate.code(), "54000");
        let hostile = "[".repeat(1_000_000);
        assert_eq!(
            validate_json(&hostile).unwrap_err().sqlstate.code(),
            "54000"
        );
        let objects = "{\"a\":".repeat(MAX_JSON_DEPTH + 1);
        assert_eq!(
            validate_json(&objects).unwrap_err().sqlstate.code(),
            "54000"
        );
    }
}
