//! A lexical scanner for PostgreSQL text: enough to split a script into
//! statements and to see the words of a statement, without being fooled by
//! semicolons or keywords inside string literals, quoted identifiers,
//! dollar-quoted bodies, comments or `BEGIN ATOMIC … END` function bodies.
//!
//! Used for simple-query messages that hold several statements and for the
//! schema files applied at boot. Comments, literals and dollar quotes are
//! skipped by the rules of `scan.rs`, which the dialect's lexer shares.

use super::scan;
use std::ops::Range;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    /// A bare word (keyword or unquoted identifier).
    Word,
    /// A quoted identifier, a string literal or a dollar-quoted string.
    Quoted,
    Semicolon,
    /// Any other character (operators, punctuation, numbers' digits, …).
    Other,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    pub kind: TokenKind,
    pub range: Range<usize>,
}

/// The name a double-quoted identifier token spells (`"a""b"` is `a"b`);
/// `None` for an unterminated one (`"abc`, `"abc""`: the token ran to the
/// end of the text) and for `""`, which PostgreSQL refuses as a
/// zero-length identifier: both are its syntax errors to report, not names.
pub fn quoted_name(text: &str) -> Option<String> {
    let inner = text.strip_prefix('"')?.strip_suffix('"')?;
    let mut name = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        // Inside, quotes come in pairs; a lone one ended the identifier
        // before the token's end.
        if c == '"' && chars.next() != Some('"') {
            return None;
        }
        name.push(c);
    }
    (!name.is_empty()).then_some(name)
}

/// Scans `sql` into tokens, skipping whitespace and comments. An
/// unterminated literal or comment runs to the end of the text (PostgreSQL
/// will report it when it sees the statement).
pub fn tokens(sql: &str) -> Vec<Token> {
    Tokens::new(sql).collect()
}

/// The tokens of `sql`, one at a time: a caller that needs only the first
/// few (what is the first word?) reads no further.
pub struct Tokens<'a> {
    sql: &'a str,
    i: usize,
    /// `'…'` is read as `E'…'`: PostgreSQL's reading with
    /// `standard_conforming_strings` off.
    plain_escapes: bool,
}

impl<'a> Tokens<'a> {
    pub fn new(sql: &'a str) -> Tokens<'a> {
        Tokens {
            sql,
            i: 0,
            plain_escapes: false,
        }
    }

    /// The tokens as PostgreSQL reads them with `standard_conforming_strings`
    /// off: a backslash escapes in `'…'` too.
    pub fn with_plain_escapes(sql: &'a str) -> Tokens<'a> {
        Tokens {
            sql,
            i: 0,
            plain_escapes: true,
        }
    }
}

impl Iterator for Tokens<'_> {
    type Item = Token;

    fn next(&mut self) -> Option<Token> {
        let bytes = self.sql.as_bytes();
        let mut i = self.i;
        let found = loop {
            let Some(&c) = bytes.get(i) else {
                break None;
            };
            let start = i;
            if let Some(end) = scan::comment(bytes, i) {
                i = end.unwrap_or(bytes.len());
                continue;
            }
            let (kind, end) = match c {
                // Unlike the dialect's lexer, a vertical tab is not space
                // here: a statement of nothing else goes on to PostgreSQL.
                b' ' | b'\t' | b'\n' | b'\r' | b'\x0c' => {
                    i += 1;
                    continue;
                }
                b'\'' | b'"' => (
                    TokenKind::Quoted,
                    scan::quoted_end(bytes, i, c, c == b'\'' && self.plain_escapes),
                ),
                b'E' | b'e' if bytes.get(i + 1) == Some(&b'\'') => {
                    (TokenKind::Quoted, scan::escape_string_end(bytes, i + 1))
                }
                b'$' => match scan::dollar_quote(self.sql, i) {
                    Some(quote) => (TokenKind::Quoted, quote.map(|q| q.end)),
                    // `$1` parameters and stray dollars.
                    None => {
                        let digits = bytes[i + 1..].iter().take_while(|b| b.is_ascii_digit());
                        (TokenKind::Other, Ok(i + 1 + digits.count()))
                    }
                },
                b';' => (TokenKind::Semicolon, Ok(i + 1)),
                c if is_word_start(c) => {
                    let rest = bytes[i..].iter().skip(1);
                    (
                        TokenKind::Word,
                        Ok(i + 1 + rest.take_while(|&&b| is_word_char(b)).count()),
                    )
                }
                _ => {
                    // One whole UTF-8 character.
                    let rest = bytes[i..].iter().skip(1);
                    let continuation = rest.take_while(|&&b| (b & 0xC0) == 0x80).count();
                    (TokenKind::Other, Ok(i + 1 + continuation))
                }
            };
            // An unterminated literal runs to the end of the text.
            i = end.unwrap_or(bytes.len());
            break Some(Token {
                kind,
                range: start..i,
            });
        };
        self.i = i;
        found
    }
}

fn is_word_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_' || c >= 0x80
}

fn is_word_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c >= 0x80
}

/// Splits a script into statements: each range covers the statement's text
/// from its first token to its last, without the terminating `;`. Empty
/// statements (`;;`, comments only) are dropped.
pub fn split_statements(sql: &str) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut first: Option<usize> = None;
    let mut last_end = 0;
    // Depth of `BEGIN ATOMIC … END` bodies, whose inner `;` do not end the
    // statement; CASE … END inside such a body nests.
    let mut atomic_depth = 0usize;
    let mut prev_word: Option<&str> = None;
    // Where the last token of any kind ended.
    let mut after_last = 0;
    for t in Tokens::new(sql) {
        after_last = t.range.end;
        match t.kind {
            TokenKind::Semicolon if atomic_depth == 0 => {
                if let Some(start) = first.take() {
                    out.push(start..last_end);
                }
                prev_word = None;
                continue;
            }
            TokenKind::Word => {
                let w = &sql[t.range.clone()];
                let opens_atomic = w.eq_ignore_ascii_case("ATOMIC")
                    && prev_word.is_some_and(|p| p.eq_ignore_ascii_case("BEGIN"));
                let opens_case = atomic_depth > 0 && w.eq_ignore_ascii_case("CASE");
                if opens_atomic || opens_case {
                    atomic_depth += 1;
                } else if atomic_depth > 0 && w.eq_ignore_ascii_case("END") {
                    atomic_depth -= 1;
                }
                prev_word = Some(w);
            }
            _ => prev_word = None,
        }
        if t.kind != TokenKind::Semicolon || atomic_depth > 0 {
            first.get_or_insert(t.range.start);
            last_end = t.range.end;
        }
    }
    // A text that ends inside an unterminated `/*` comment is PostgreSQL's
    // syntax error: the comment stays in the last statement (or is one of
    // its own), so that whoever reads the statement reports it.
    let open_comment = open_comment_from(sql.as_bytes(), after_last);
    match (first, open_comment) {
        (Some(start), Some(_)) => out.push(start..sql.len()),
        (Some(start), None) => out.push(start..last_end),
        (None, Some(comment)) => out.push(comment..sql.len()),
        (None, None) => {}
    }
    out
}

/// Where an unterminated `/*` comment starts, if the text from `from`
/// holds only whitespace and comments, the last of them unterminated.
fn open_comment_from(bytes: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    loop {
        match scan::comment(bytes, i) {
            Some(Ok(end)) => i = end,
            Some(Err(_)) => return Some(i),
            None if bytes.get(i).is_some_and(u8::is_ascii_whitespace) => i += 1,
            None => return None,
        }
    }
}

/// The bare words of a statement, in order, outside literals and comments.
pub fn words(sql: &str) -> impl Iterator<Item = &str> {
    Tokens::new(sql)
        .filter(|t| t.kind == TokenKind::Word)
        .map(move |t| &sql[t.range])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(sql: &str) -> Vec<&str> {
        split_statements(sql).into_iter().map(|r| &sql[r]).collect()
    }

    #[test]
    fn splits_plain_statements_and_drops_empty_ones() {
        assert_eq!(
            split("SELECT 1; SELECT 2;;  ; "),
            vec!["SELECT 1", "SELECT 2"]
        );
        assert_eq!(split("SELECT 1"), vec!["SELECT 1"]);
        assert_eq!(
            split("  -- only a comment\n ; /* and another */"),
            Vec::<&str>::new()
        );
    }

    #[test]
    fn semicolons_inside_literals_and_identifiers_do_not_split() {
        assert_eq!(
            split("SELECT 'a;b', \"c;d\", E'e\\';f'; SELECT 'it''s;'"),
            vec!["SELECT 'a;b', \"c;d\", E'e\\';f'", "SELECT 'it''s;'"]
        );
    }

    #[test]
    fn an_escape_string_continued_on_another_line_keeps_its_escapes() {
        // PostgreSQL reads each as one string: the continuation after a
        // newline is an escape string too.
        let sql = "SELECT E'a'\n'\\'; PUSH INTO qa VALUES (''1''); --' AS v";
        assert_eq!(split(sql), vec![sql]);
        let sql = "SELECT e'a' -- c\n  -- d\n\t'\\';x' AS v; SELECT 2";
        assert_eq!(
            split(sql),
            vec!["SELECT e'a' -- c\n  -- d\n\t'\\';x' AS v", "SELECT 2"]
        );
        let sql = "SELECT E'a'\n'\\''; SET search_path TO x; SELECT E'b'\n'\\''";
        assert_eq!(
            split(sql),
            vec![
                "SELECT E'a'\n'\\''",
                "SET search_path TO x",
                "SELECT E'b'\n'\\''"
            ]
        );
        // Without a newline between them there is no continuation.
        assert_eq!(
            split("SELECT E'a' '\\'; SELECT 2"),
            vec!["SELECT E'a' '\\'", "SELECT 2"]
        );
    }

    #[test]
    fn dollar_quoted_bodies_are_one_token() {
        let sql = "CREATE FUNCTION f() RETURNS int LANGUAGE plpgsql AS $body$ BEGIN RETURN 1; END $body$; SELECT $$x;y$$";
        assert_eq!(
            split(sql),
            vec![
                "CREATE FUNCTION f() RETURNS int LANGUAGE plpgsql AS $body$ BEGIN RETURN 1; END $body$",
                "SELECT $$x;y$$"
            ]
        );
    }

    #[test]
    fn parameters_are_not_dollar_quotes() {
        assert_eq!(
            split("SELECT $1; SELECT $2::int"),
            vec!["SELECT $1", "SELECT $2::int"]
        );
    }

    #[test]
    fn comments_hide_semicolons_and_nest() {
        assert_eq!(
            split("SELECT 1 -- a; b\n + 1; /* x; /* y; */ z; */ SELECT 2"),
            vec!["SELECT 1 -- a; b\n + 1", "SELECT 2"]
        );
    }

    #[test]
    fn an_unterminated_comment_stays_with_the_text_it_ends() {
        assert_eq!(
            split("PUSH INTO q VALUES ('1') /* never closed"),
            vec!["PUSH INTO q VALUES ('1') /* never closed"]
        );
        assert_eq!(
            split("SELECT 1; -- fine\n /* open /* nested */"),
            vec!["SELECT 1", "/* open /* nested */"]
        );
        assert_eq!(split("SELECT 1 /* closed */ "), vec!["SELECT 1"]);
        assert_eq!(
            split("SELECT 'x /* in a literal"),
            vec!["SELECT 'x /* in a literal"]
        );
    }

    #[test]
    fn begin_atomic_bodies_keep_their_semicolons() {
        let sql = "CREATE FUNCTION g() RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT CASE WHEN true THEN 1 END; SELECT 2; END; SELECT 3";
        assert_eq!(
            split(sql),
            vec![
                "CREATE FUNCTION g() RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT CASE WHEN true THEN 1 END; SELECT 2; END",
                "SELECT 3"
            ]
        );
    }

    #[test]
    fn unterminated_literal_runs_to_the_end() {
        assert_eq!(
            split("SELECT 'abc; SELECT 2"),
            vec!["SELECT 'abc; SELECT 2"]
        );
        assert_eq!(
            split("SELECT $q$ never closed;"),
            vec!["SELECT $q$ never closed;"]
        );
    }

    #[test]
    fn words_skip_literals_and_comments() {
        let w: Vec<&str> = words("SET /* LOCAL */ search_path = 'LOCAL', public").collect();
        assert_eq!(w, vec!["SET", "search_path", "public"]);
    }

    #[test]
    fn multibyte_text_is_not_split_inside_characters() {
        assert_eq!(
            split("SELECT 'é;' || ü; SELECT '✓'"),
            vec!["SELECT 'é;' || ü", "SELECT '✓'"]
        );
    }
}
