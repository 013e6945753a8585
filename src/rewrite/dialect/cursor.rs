//! The cursor every statement parser walks: keywords, punctuation and typed
//! values, ending with [`Cursor::finish`] so trailing junk is an error.

use std::time::Duration;

use super::duration::parse_duration;
use super::error::{quoted, ParseError, SqlState};
use super::json::validate_json;
use super::lexer::{char_position, Lexer, Token, TokenKind};
use super::value::{parse_count, parse_integer, Json, Name, Value, MAX_BATCH};

pub(crate) type Result<T> = std::result::Result<T, ParseError>;

pub(crate) struct Cursor<'a> {
    sql: &'a str,
    tokens: Vec<Token<'a>>,
    /// Where the tokens end: the end of the text, or the place the lexer failed.
    eof: Token<'a>,
    /// Reported when the parser reaches `eof`, so an earlier grammar error
    /// wins over a later lexical one, as in PostgreSQL.
    lex_error: Option<ParseError>,
    index: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(sql: &'a str) -> Self {
        let mut lexer = Lexer::new(sql);
        let mut tokens = Vec::new();
        loop {
            match lexer.next_token() {
                Ok(token) if token.kind == TokenKind::Eof => {
                    return Cursor {
                        sql,
                        tokens,
                        eof: token,
                        lex_error: None,
                        index: 0,
                    }
                }
                Ok(token) => tokens.push(token),
                Err(err) => {
                    return Cursor {
                        sql,
                        tokens,
                        eof: Token {
                            kind: TokenKind::Eof,
                            start: sql.len(),
                            end: sql.len(),
                        },
                        lex_error: Some(err),
                        index: 0,
                    }
                }
            }
        }
    }

    pub fn peek(&self) -> &Token<'a> {
        self.peek_ahead(0)
    }

    pub fn peek_ahead(&self, ahead: usize) -> &Token<'a> {
        self.tokens.get(self.index + ahead).unwrap_or(&self.eof)
    }

    pub fn advance(&mut self) -> Token<'a> {
        let token = self.peek().clone();
        if self.index < self.tokens.len() {
            self.index += 1;
        }
        token
    }

    pub fn peek_keyword(&self, keyword: &str) -> bool {
        self.peek().is_keyword(keyword)
    }

    pub fn eat_keyword(&mut self, keyword: &str) -> bool {
        let found = self.peek_keyword(keyword);
        if found {
            self.advance();
        }
        found
    }

    pub fn expect_keyword(&mut self, keyword: &str) -> Result<()> {
        if self.eat_keyword(keyword) {
            Ok(())
        } else {
            Err(self.unexpected(keyword))
        }
    }

    /// Consumes punctuation of this kind, if it is next.
    pub fn eat(&mut self, kind: &TokenKind<'a>) -> bool {
        let found = &self.peek().kind == kind;
        if found {
            self.advance();
        }
        found
    }

    pub fn expect(&mut self, kind: &TokenKind<'a>, expected: &str) -> Result<()> {
        if self.eat(kind) {
            Ok(())
        } else {
            Err(self.unexpected(expected))
        }
    }

    /// At `;` or the end: nothing more belongs to the statement.
    pub fn at_end(&self) -> bool {
        matches!(self.peek().kind, TokenKind::Semicolon | TokenKind::Eof)
    }

    /// Allows one `;`, then requires the end of the text.
    pub fn finish(&mut self) -> Result<()> {
        self.eat(&TokenKind::Semicolon);
        if self.peek().kind == TokenKind::Eof && self.lex_error.is_none() {
            Ok(())
        } else {
            Err(self.unexpected("end of statement"))
        }
    }

    pub fn position(&self, token: &Token<'a>) -> usize {
        char_position(self.sql, token.start)
    }

    /// The source text of a token, as PostgreSQL quotes it in "at or near".
    pub fn text(&self, token: &Token<'a>) -> &'a str {
        self.sql.get(token.start..token.end).unwrap_or("")
    }

    /// The statement text between two byte offsets (a stream's expressions
    /// are kept as the user wrote them, for PostgreSQL to read).
    pub fn slice(&self, start: usize, end: usize) -> &'a str {
        self.sql.get(start..end).unwrap_or("")
    }

    /// A syntax error at the next token, saying what was expected there.
    pub fn unexpected(&self, expected: &str) -> ParseError {
        let token = self.peek();
        if token.kind == TokenKind::Eof {
            if let Some(err) = &self.lex_error {
                return err.clone();
            }
            return ParseError::new(
                SqlState::SYNTAX_ERROR,
                format!("syntax error at end of input: expected {expected}"),
            )
            .at(self.position(token));
        }
        ParseError::new(
            SqlState::SYNTAX_ERROR,
            format!(
                "syntax error at or near {}: expected {expected}",
                quoted(self.text(token))
            ),
        )
        .at(self.position(token))
    }

    /// `42601` when a clause that may appear once appears again.
    pub fn once(&self, already_given: bool, clause: &Token<'a>, name: &str) -> Result<()> {
        if already_given {
            return Err(ParseError::new(
                SqlState::SYNTAX_ERROR,
                format!("{name} specified more than once"),
            )
            .at(self.position(clause)));
        }
        Ok(())
    }

    /// A name: bare word, `"quoted identifier"`, `'string literal'` or `$n`;
    /// a literal must pass `check` (its error gets the token's position).
    pub fn name_with(
        &mut self,
        expected: &str,
        check: impl Fn(&str) -> Result<()>,
    ) -> Result<Name> {
        self.decorated(|c| c.bare_name_with(expected, check))
    }

    fn bare_name_with(
        &mut self,
        expected: &str,
        check: impl Fn(&str) -> Result<()>,
    ) -> Result<Name> {
        let token = self.peek().clone();
        let text = match &token.kind {
            TokenKind::Word(word) => (*word).to_string(),
            TokenKind::QuotedIdent(text) | TokenKind::String(text) => text.clone(),
            TokenKind::Param(n) => {
                self.advance();
                return Ok(Value::Param(*n));
            }
            _ => return Err(self.unexpected(expected)),
        };
        check(&text).map_err(|err| err.at(self.position(&token)))?;
        self.advance();
        Ok(Value::Literal(text))
    }

    /// A queue, partition, group or timer-key name (see `validate_name`).
    pub fn name(&mut self, what: &str) -> Result<Name> {
        self.name_with(&format!("a {what} name"), |text| {
            super::value::validate_name(what, text)
        })
    }

    /// A `'string literal'` or `$n`, taken as written.
    pub fn text_value(&mut self, expected: &str) -> Result<Value<String>> {
        self.decorated(|c| c.bare_text_value(expected))
    }

    fn bare_text_value(&mut self, expected: &str) -> Result<Value<String>> {
        let token = self.peek().clone();
        let value = match token.kind {
            TokenKind::String(text) => Value::Literal(text),
            TokenKind::Param(n) => Value::Param(n),
            _ => return Err(self.unexpected(expected)),
        };
        self.advance();
        Ok(value)
    }

    /// JSON text: a string literal that must be valid JSON, or `$n`.
    pub fn json(&mut self, what: &str) -> Result<Json> {
        let token = self.peek().clone();
        let value = self.text_value(&format!("{what} as a JSON string literal or parameter"))?;
        if let Value::Literal(text) = &value {
            validate_json(text).map_err(|err| {
                ParseError {
                    message: format!("{} ({what})", err.message),
                    ..err
                }
                .at(self.position(&token))
            })?;
        }
        Ok(value)
    }

    /// The text of a number-like token (`5`, `-3`, `1.5`, `250ms`) or a
    /// string literal; `None` (nothing consumed) for anything else.
    fn scalar_text(&mut self) -> Option<(String, Token<'a>)> {
        let token = self.peek().clone();
        let text = match &token.kind {
            TokenKind::Word(word)
                if word
                    .bytes()
                    .next()
                    .is_some_and(|b| b.is_ascii_digit() || matches!(b, b'-' | b'+' | b'.')) =>
            {
                (*word).to_string()
            }
            TokenKind::String(text) => text.clone(),
            _ => return None,
        };
        self.advance();
        Some((text, token))
    }

    /// A typed scalar: a literal converted by `convert`, or `$n`.
    fn scalar<T>(
        &mut self,
        expected: &str,
        convert: impl Fn(&str) -> Result<T>,
    ) -> Result<Value<T>> {
        self.decorated(|c| c.bare_scalar(expected, convert))
    }

    /// A value as drivers that interpolate parameters themselves write it:
    /// in parentheses and/or with a cast (`('q')`, `'{}'::jsonb`,
    /// `('0'::int4)`, `$1::text`). PostgreSQL accepts these forms, so the
    /// dialect does too; the cast names no conversion of ours and is
    /// skipped (the engine checks the value for what it stands for).
    fn decorated<T>(&mut self, inner: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        let mut opened = 0;
        while self.peek().kind == TokenKind::LeftParen {
            self.advance();
            opened += 1;
        }
        let value = inner(self)?;
        self.skip_casts();
        for _ in 0..opened {
            self.expect(&TokenKind::RightParen, "')'")?;
            self.skip_casts();
        }
        Ok(value)
    }

    /// `::type`, where type may be several words (`timestamp with time
    /// zone`, `character varying`, `double precision`) and end in `[]`.
    fn skip_casts(&mut self) {
        loop {
            let is_cast = self.peek().kind == TokenKind::Symbol(':')
                && self.peek_ahead(1).kind == TokenKind::Symbol(':');
            let TokenKind::Word(type_name) = self.peek_ahead(2).kind else {
                return;
            };
            if !is_cast {
                return;
            }
            for _ in 0..3 {
                self.advance();
            }
            let type_name = type_name.to_ascii_lowercase();
            let follow: &[&[&str]] = match type_name.as_str() {
                "timestamp" | "time" => &[&["with", "time", "zone"], &["without", "time", "zone"]],
                "character" | "char" | "bit" => &[&["varying"]],
                "double" => &[&["precision"]],
                _ => &[],
            };
            for words in follow {
                let matches = words
                    .iter()
                    .enumerate()
                    .all(|(i, w)| self.peek_ahead(i).is_keyword(w));
                if matches {
                    for _ in 0..words.len() {
                        self.advance();
                    }
                    break;
                }
            }
            if self.peek().kind == TokenKind::Symbol('[')
                && self.peek_ahead(1).kind == TokenKind::Symbol(']')
            {
                self.advance();
                self.advance();
            }
        }
    }

    fn bare_scalar<T>(
        &mut self,
        expected: &str,
        convert: impl Fn(&str) -> Result<T>,
    ) -> Result<Value<T>> {
        if let TokenKind::Param(n) = self.peek().kind {
            self.advance();
            return Ok(Value::Param(n));
        }
        let Some((text, token)) = self.scalar_text() else {
            return Err(self.unexpected(expected));
        };
        convert(&text)
            .map(Value::Literal)
            .map_err(|err| err.at(self.position(&token)))
    }

    /// A duration: seconds, `'5s'`-style text or an interval (see `parse_duration`), or `$n`.
    pub fn duration(&mut self, what: &str) -> Result<Value<Duration>> {
        self.scalar(&format!("a duration for {what}"), parse_duration)
    }

    /// A LIMIT or PARTITIONS count, 1..=10000, or `$n`.
    pub fn count(&mut self, what: &str) -> Result<Value<u32>> {
        self.scalar(&format!("a number for {what}"), |text| {
            parse_count(what, text)
        })
    }

    /// A bigint (versions, INCR amounts), or `$n`.
    pub fn integer(&mut self, what: &str) -> Result<Value<i64>> {
        self.scalar(&format!("an integer for {what}"), parse_integer)
    }

    /// `item (, item)*`, at most [`MAX_BATCH`] items (else `54000`).
    pub fn list<T>(
        &mut self,
        what: &str,
        mut item: impl FnMut(&mut Self) -> Result<T>,
    ) -> Result<Vec<T>> {
        let mut items = vec![item(self)?];
        while self.eat(&TokenKind::Comma) {
            if items.len() >= MAX_BATCH as usize {
                return Err(ParseError::new(
                    SqlState::PROGRAM_LIMIT_EXCEEDED,
                    format!("too many {what}: at most {MAX_BATCH} in one statement"),
                )
                .at(self.position(self.peek())));
            }
            items.push(item(self)?);
        }
        Ok(items)
    }
}
