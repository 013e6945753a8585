//! Tokens of the dialect, with their byte offsets in the statement text.
//!
//! The lexer follows PostgreSQL's rules where the dialect overlaps them
//! (`--` and nested `/* */` comments, `'…'` with `''`, `"…"` with `""`,
//! `$tag$…$tag$`, all skipped by `rewrite/scan.rs`, which the splitter
//! shares; `$n`), and adds the dialect's bare names: a word may
//! contain `-`, `.` and `:` so `orders-eu` and `billing.invoices` need no
//! quotes. It is pulled one token at a time so recognising a statement costs
//! only its first two words, however large an ordinary query is.

use super::error::{quoted, ParseError, SqlState};
use crate::rewrite::scan::{self, Unterminated};

/// PostgreSQL's own limit on parameters in one statement.
pub(crate) const MAX_PARAM: usize = 65_535;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TokenKind<'a> {
    /// A bare word: keyword, unquoted name or number (`POP`, `orders-eu`, `42`, `-5`, `250ms`).
    Word(&'a str),
    /// `"…"`, unescaped.
    QuotedIdent(String),
    /// `'…'` or `$$…$$`, unescaped.
    String(String),
    /// `$n`, n ≥ 1.
    Param(usize),
    LeftParen,
    RightParen,
    Comma,
    Equals,
    Semicolon,
    /// Any other character; only ever a syntax error, reported at its place.
    Symbol(char),
    Eof,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Token<'a> {
    pub kind: TokenKind<'a>,
    /// Byte offsets into the statement text.
    pub start: usize,
    pub end: usize,
}

impl<'a> Token<'a> {
    /// Whether this token is the bare word `keyword` (ASCII case-insensitive).
    pub fn is_keyword(&self, keyword: &str) -> bool {
        matches!(self.kind, TokenKind::Word(word) if word.eq_ignore_ascii_case(keyword))
    }
}

/// 1-based character position of a byte offset, as PostgreSQL reports it.
pub(crate) fn char_position(sql: &str, byte: usize) -> usize {
    let prefix = sql.get(..byte).unwrap_or(sql);
    prefix.chars().count() + 1
}

#[derive(Clone)]
pub(crate) struct Lexer<'a> {
    sql: &'a str,
    pos: usize,
}

fn is_word_byte(byte: u8) -> bool {
    // Every byte of a non-ASCII character is ≥ 0x80, so words end on
    // character boundaries; PostgreSQL likewise treats them as letters.
    byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'-' | b'.' | b':') || byte >= 0x80
}

impl<'a> Lexer<'a> {
    pub fn new(sql: &'a str) -> Self {
        Lexer { sql, pos: 0 }
    }

    fn byte(&self, at: usize) -> Option<u8> {
        self.sql.as_bytes().get(at).copied()
    }

    fn error(&self, sqlstate: SqlState, message: String, at: usize) -> ParseError {
        ParseError::new(sqlstate, message).at(char_position(self.sql, at))
    }

    fn text(&self, start: usize, end: usize) -> &'a str {
        self.sql.get(start..end).unwrap_or("")
    }

    /// Skips whitespace and comments.
    fn skip_trivia(&mut self) -> Result<(), ParseError> {
        loop {
            match scan::comment(self.sql.as_bytes(), self.pos) {
                Some(Ok(end)) => self.pos = end,
                Some(Err(Unterminated)) => {
                    return Err(self.error(
                        SqlState::SYNTAX_ERROR,
                        "unterminated /* comment".to_string(),
                        self.pos,
                    ))
                }
                None if matches!(
                    self.byte(self.pos),
                    Some(b' ' | b'\t' | b'\n' | b'\r' | b'\x0b' | b'\x0c')
                ) =>
                {
                    self.pos += 1
                }
                None => return Ok(()),
            }
        }
    }

    pub fn next_token(&mut self) -> Result<Token<'a>, ParseError> {
        self.skip_trivia()?;
        let start = self.pos;
        let Some(byte) = self.byte(start) else {
            return Ok(Token {
                kind: TokenKind::Eof,
                start,
                end: start,
            });
        };
        let next = self.byte(start + 1);
        let kind = match byte {
            b'(' => self.single(TokenKind::LeftParen),
            b')' => self.single(TokenKind::RightParen),
            b',' => self.single(TokenKind::Comma),
            b'=' => self.single(TokenKind::Equals),
            b';' => self.single(TokenKind::Semicolon),
            b'\'' => TokenKind::String(self.quoted(b'\'', "unterminated quoted string")?),
            b'"' => {
                let ident = self.quoted(b'"', "unterminated quoted identifier")?;
                if ident.is_empty() {
                    return Err(self.error(
                        SqlState::SYNTAX_ERROR,
                        "zero-length delimited identifier at or near \"\"\"\"".to_string(),
                        start,
                    ));
                }
                TokenKind::QuotedIdent(ident)
            }
            b'$' if next.is_some_and(|b| b.is_ascii_digit()) => self.param()?,
            b'$' => match self.dollar_quoted()? {
                Some(text) => TokenKind::String(text),
                None => self.single(TokenKind::Symbol('$')),
            },
            b'-' if next.is_some_and(|b| b.is_ascii_digit()) => self.word(),
            _ if byte.is_ascii_alphanumeric() || byte == b'_' || byte >= 0x80 => self.word(),
            _ => self.single(TokenKind::Symbol(char::from(byte))),
        };
        Ok(Token {
            kind,
            start,
            end: self.pos,
        })
    }

    fn single(&mut self, kind: TokenKind<'a>) -> TokenKind<'a> {
        self.pos += 1;
        kind
    }

    fn word(&mut self) -> TokenKind<'a> {
        let start = self.pos;
        self.pos += 1;
        while let Some(byte) = self.byte(self.pos) {
            // `--` starts a comment even inside a word, as in PostgreSQL.
            if !is_word_byte(byte) || scan::opens_comment(self.sql.as_bytes(), self.pos) {
                break;
            }
            self.pos += 1;
        }
        TokenKind::Word(self.text(start, self.pos))
    }

    /// `'…'` or `"…"`, where a doubled delimiter stands for itself.
    fn quoted(&mut self, delimiter: u8, unterminated: &str) -> Result<String, ParseError> {
        let start = self.pos;
        let Ok(end) = scan::quoted_end(self.sql.as_bytes(), start, delimiter, false) else {
            return Err(self.error(
                SqlState::SYNTAX_ERROR,
                format!(
                    "{unterminated} at or near {}",
                    quoted(self.text(start, self.sql.len()))
                ),
                start,
            ));
        };
        self.pos = end;
        let (doubled, single) = if delimiter == b'"' {
            ("\"\"", "\"")
        } else {
            ("''", "'")
        };
        Ok(self.text(start + 1, end - 1).replace(doubled, single))
    }

    fn param(&mut self) -> Result<TokenKind<'a>, ParseError> {
        let start = self.pos;
        self.pos += 1;
        while self.byte(self.pos).is_some_and(|b| b.is_ascii_digit()) {
            self.pos += 1;
        }
        if self
            .byte(self.pos)
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_' || b >= 0x80)
        {
            while self.byte(self.pos).is_some_and(is_word_byte) {
                self.pos += 1;
            }
            return Err(self.error(
                SqlState::SYNTAX_ERROR,
                format!(
                    "trailing junk after parameter at or near {}",
                    quoted(self.text(start, self.pos))
                ),
                start,
            ));
        }
        let digits = self.text(start + 1, self.pos);
        match digits.parse::<usize>() {
            Ok(n) if (1..=MAX_PARAM).contains(&n) => Ok(TokenKind::Param(n)),
            _ => Err(self.error(
                SqlState::UNDEFINED_PARAMETER,
                format!("there is no parameter ${digits}"),
                start,
            )),
        }
    }

    /// `$tag$…$tag$`; `None` (nothing consumed) when the `$` does not open one.
    fn dollar_quoted(&mut self) -> Result<Option<String>, ParseError> {
        let start = self.pos;
        match scan::dollar_quote(self.sql, start) {
            None => Ok(None),
            Some(Ok(quote)) => {
                self.pos = quote.end;
                Ok(Some(
                    self.text(quote.body.start, quote.body.end).to_string(),
                ))
            }
            Some(Err(Unterminated)) => Err(self.error(
                SqlState::SYNTAX_ERROR,
                format!(
                    "unterminated dollar-quoted string at or near {}",
                    quoted(self.text(start, self.sql.len()))
                ),
                start,
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(sql: &str) -> Result<Vec<TokenKind<'_>>, ParseError> {
        let mut lexer = Lexer::new(sql);
        let mut out = Vec::new();
        loop {
            let token = lexer.next_token()?;
            if token.kind == TokenKind::Eof {
                return Ok(out);
            }
            out.push(token.kind);
        }
    }

    #[test]
    fn bare_words_keep_dashes_dots_and_colons() {
        assert_eq!(
            kinds("orders-eu billing.invoices user:1 42 -5 250ms").unwrap(),
            vec![
                TokenKind::Word("orders-eu"),
                TokenKind::Word("billing.invoices"),
                TokenKind::Word("user:1"),
                TokenKind::Word("42"),
                TokenKind::Word("-5"),
                TokenKind::Word("250ms"),
            ]
        );
    }

    #[test]
    fn double_dash_starts_a_comment_even_after_a_word() {
        assert_eq!(
            kinds("a--comment\nb").unwrap(),
            vec![TokenKind::Word("a"), TokenKind::Word("b")]
        );
    }

    #[test]
    fn block_comments_nest() {
        assert_eq!(
            kinds("/* a /* b */ c */ x").unwrap(),
            vec![TokenKind::Word("x")]
        );
        let err = kinds("x /* a /* b */").unwrap_err();
        assert_eq!(err.sqlstate.code(), "42601");
        assert_eq!(err.position, Some(3));
    }

    #[test]
    fn quotes_unescape_doubled_delimiters() {
        assert_eq!(
            kinds(r#"'it''s' "a""b" $$x'y$$ $t$ $$ $t$"#).unwrap(),
            vec![
                TokenKind::String("it's".into()),
                TokenKind::QuotedIdent("a\"b".into()),
                TokenKind::String("x'y".into()),
                TokenKind::String(" $$ ".into()),
            ]
        );
    }

    #[test]
    fn unterminated_quotes_are_syntax_errors_at_the_quote() {
        for (sql, position) in [("ab 'cd", 4), ("ab \"cd", 4), ("é $q$ x", 3)] {
            let err = kinds(sql).unwrap_err();
            assert_eq!(err.sqlstate.code(), "42601", "{sql}");
            assert_eq!(err.position, Some(position), "{sql}");
        }
        assert_eq!(kinds("\"\"").unwrap_err().sqlstate.code(), "42601");
    }

    #[test]
    fn parameters() {
        assert_eq!(
            kinds("$1,$65535").unwrap(),
            vec![
                TokenKind::Param(1),
                TokenKind::Comma,
                TokenKind::Param(65535)
            ]
        );
        assert_eq!(kinds("$0").unwrap_err().sqlstate.code(), "42P02");
        assert_eq!(kinds("$65536").unwrap_err().sqlstate.code(), "42P02");
        assert_eq!(
            kinds("$99999999999999999999999")
                .unwrap_err()
                .sqlstate
                .code(),
            "42P02"
        );
        assert_eq!(kinds("$1abc").unwrap_err().sqlstate.code(), "42601");
    }

    #[test]
    fn other_characters_are_symbols() {
        assert_eq!(
            kinds("* :").unwrap(),
            vec![TokenKind::Symbol('*'), TokenKind::Symbol(':')]
        );
        assert_eq!(kinds("$ x").unwrap()[0], TokenKind::Symbol('$'));
    }

    #[test]
    fn positions_count_characters_not_bytes() {
        assert_eq!(char_position("ééx", 4), 3);
        assert_eq!(char_position("abc", 0), 1);
    }
}
