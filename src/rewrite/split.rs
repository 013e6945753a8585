//! A lexical scanner for PostgreSQL text: enough to split a script into
//! statements and to see the words of a statement, without being fooled by
//! semicolons or keywords inside string literals, quoted identifiers,
//! dollar-quoted bodies, comments or `BEGIN ATOMIC … END` function bodies.
//!
//! Used for simple-query messages that hold several statements and for the
//! schema files applied at boot.

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

/// Scans `sql` into tokens, skipping whitespace and comments. An
/// unterminated literal or comment runs to the end of the text (PostgreSQL
/// will report it when it sees the statement).
pub fn tokens(sql: &str) -> Vec<Token> {
    Tokens::new(sql).collect()
}

/// The tokens of `sql`, one at a time: a caller that needs only the first
/// few (what is the first word?) reads no further.
pub struct Tokens<'a> {
    bytes: &'a [u8],
    i: usize,
}

impl<'a> Tokens<'a> {
    pub fn new(sql: &'a str) -> Tokens<'a> {
        Tokens {
            bytes: sql.as_bytes(),
            i: 0,
        }
    }
}

impl Iterator for Tokens<'_> {
    type Item = Token;

    fn next(&mut self) -> Option<Token> {
        let bytes = self.bytes;
        let mut i = self.i;
        let found = loop {
            if i >= bytes.len() {
                break None;
            }
            let c = bytes[i];
            let start = i;
            match c {
                b' ' | b'\t' | b'\n' | b'\r' | b'\x0c' => i += 1,
                b'-' if bytes.get(i + 1) == Some(&b'-') => {
                    while i < bytes.len() && bytes[i] != b'\n' {
                        i += 1;
                    }
                }
                b'/' if bytes.get(i + 1) == Some(&b'*') => {
                    // Block comments nest in PostgreSQL.
                    let mut depth = 0usize;
                    while i < bytes.len() {
                        if bytes[i] == b'/' && bytes.get(i + 1) == Some(&b'*') {
                            depth += 1;
                            i += 2;
                        } else if bytes[i] == b'*' && bytes.get(i + 1) == Some(&b'/') {
                            depth -= 1;
                            i += 2;
                            if depth == 0 {
                                break;
                            }
                        } else {
                            i += 1;
                        }
                    }
                }
                b'\'' => {
                    i = end_of_quoted(bytes, i, b'\'', false);
                    break Some(tok(TokenKind::Quoted, start, i));
                }
                b'"' => {
                    i = end_of_quoted(bytes, i, b'"', false);
                    break Some(tok(TokenKind::Quoted, start, i));
                }
                b'E' | b'e' if bytes.get(i + 1) == Some(&b'\'') => {
                    i = end_of_quoted(bytes, i + 1, b'\'', true);
                    break Some(tok(TokenKind::Quoted, start, i));
                }
                b'$' => {
                    if let Some(tag_end) = dollar_tag_end(bytes, i) {
                        let tag = &bytes[i..=tag_end];
                        let body_start = tag_end + 1;
                        i = find(bytes, body_start, tag)
                            .map(|p| p + tag.len())
                            .unwrap_or(bytes.len());
                        break Some(tok(TokenKind::Quoted, start, i));
                    }
                    // `$1` parameters and stray dollars.
                    i += 1;
                    while i < bytes.len() && bytes[i].is_ascii_digit() {
                        i += 1;
                    }
                    break Some(tok(TokenKind::Other, start, i));
                }
                b';' => {
                    i += 1;
                    break Some(tok(TokenKind::Semicolon, start, i));
                }
                c if is_word_start(c) => {
                    while i < bytes.len() && is_word_char(bytes[i]) {
                        i += 1;
                    }
                    break Some(tok(TokenKind::Word, start, i));
                }
                _ => {
                    // Advance one whole UTF-8 character.
                    i += 1;
                    while i < bytes.len() && (bytes[i] & 0xC0) == 0x80 {
                        i += 1;
                    }
                    break Some(tok(TokenKind::Other, start, i));
                }
            }
        };
        self.i = i;
        found
    }
}

fn tok(kind: TokenKind, start: usize, end: usize) -> Token {
    Token {
        kind,
        range: start..end,
    }
}

fn is_word_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_' || c >= 0x80
}

fn is_word_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c >= 0x80
}

/// Index just past the closing quote of a literal opened at `open`.
fn end_of_quoted(bytes: &[u8], open: usize, quote: u8, backslash_escapes: bool) -> usize {
    let mut i = open + 1;
    while i < bytes.len() {
        let c = bytes[i];
        if backslash_escapes && c == b'\\' {
            i += 2;
            continue;
        }
        if c == quote {
            if bytes.get(i + 1) == Some(&quote) {
                i += 2;
                continue;
            }
            return i + 1;
        }
        i += 1;
    }
    bytes.len()
}

/// If a dollar-quote tag (`$$` or `$tag$`) starts at `i`, the index of its
/// closing `$`.
fn dollar_tag_end(bytes: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    if bytes.get(j) == Some(&b'$') {
        return Some(j);
    }
    if !bytes
        .get(j)
        .copied()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_' || c >= 0x80)
    {
        return None;
    }
    while j < bytes.len()
        && (bytes[j].is_ascii_alphanumeric() || bytes[j] == b'_' || bytes[j] >= 0x80)
    {
        j += 1;
    }
    (bytes.get(j) == Some(&b'$')).then_some(j)
}

fn find(haystack: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    if from > haystack.len() {
        return None;
    }
    haystack[from..]
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| p + from)
}

/// Splits a script into statements: each range covers the statement's text
/// from its first token to its last, without the terminating `;`. Empty
/// statements (`;;`, comments only) are dropped.
pub fn split_statements(sql: &str) -> Vec<Range<usize>> {
    let toks = tokens(sql);
    let mut out = Vec::new();
    let mut first: Option<usize> = None;
    let mut last_end = 0;
    // Depth of `BEGIN ATOMIC … END` bodies, whose inner `;` do not end the
    // statement; CASE … END inside such a body nests.
    let mut atomic_depth = 0usize;
    let mut prev_word: Option<&str> = None;
    for t in &toks {
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
    if let Some(start) = first {
        out.push(start..last_end);
    }
    out
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
