//! PostgreSQL's lexical rules for the text that hides what it holds from the
//! grammar: `--` comments to the end of the line, `/* */` comments (they
//! nest), `'…'` and `"…"` where a doubled quote stands for itself, `E'…'`
//! where a backslash also escapes, and `$tag$…$tag$` bodies. `U&'…'` and
//! `U&"…"` need no rule of their own: their quotes double like the plain
//! ones.
//!
//! Both lexers skip with these functions, the splitter's (`split.rs`) and
//! the dialect's (`dialect/lexer.rs`), so the rules are written once; each
//! lexer decides what a word is and what an unterminated literal means to it.
//! Every function looks at each byte once and allocates nothing.

use std::ops::Range;

/// A comment or literal that runs to the end of the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Unterminated;

/// Whether a comment starts at `at`.
pub(crate) fn opens_comment(bytes: &[u8], at: usize) -> bool {
    matches!(
        (bytes.get(at), bytes.get(at + 1)),
        (Some(b'-'), Some(b'-')) | (Some(b'/'), Some(b'*'))
    )
}

/// If a comment starts at `start`, the index just past it (past the
/// newline that ends a `--` comment).
pub(crate) fn comment(bytes: &[u8], start: usize) -> Option<Result<usize, Unterminated>> {
    if !opens_comment(bytes, start) {
        return None;
    }
    if bytes[start] == b'-' {
        let rest = bytes.get(start..).unwrap_or_default();
        return Some(Ok(rest
            .iter()
            .position(|&b| b == b'\n')
            .map_or(bytes.len(), |newline| start + newline + 1)));
    }
    let mut i = start + 2;
    // A counter, not recursion: nesting depth is the client's to choose.
    let mut depth = 1usize;
    while depth > 0 {
        match (bytes.get(i), bytes.get(i + 1)) {
            (None, _) => return Some(Err(Unterminated)),
            (Some(b'/'), Some(b'*')) => {
                depth += 1;
                i += 2;
            }
            (Some(b'*'), Some(b'/')) => {
                depth -= 1;
                i += 2;
            }
            _ => i += 1,
        }
    }
    Some(Ok(i))
}

/// The index just past the closing quote of a literal or quoted identifier
/// opened by the `quote` at `open`.
pub(crate) fn quoted_end(
    bytes: &[u8],
    open: usize,
    quote: u8,
    backslash_escapes: bool,
) -> Result<usize, Unterminated> {
    let mut i = open + 1;
    while let Some(&c) = bytes.get(i) {
        if backslash_escapes && c == b'\\' {
            i += 2;
        } else if c != quote {
            i += 1;
        } else if bytes.get(i + 1) == Some(&quote) {
            i += 2;
        } else {
            return Ok(i + 1);
        }
    }
    Err(Unterminated)
}

/// The index just past an `E'…'` string opened by the quote at `open`,
/// with its continuations: PostgreSQL reads `E'a'`, white space holding a
/// newline (and `--` comments), then `'…'` as one string, the continuation
/// with the escapes of the first part (`E'a'⏎'\''` is one string).
pub(crate) fn escape_string_end(bytes: &[u8], open: usize) -> Result<usize, Unterminated> {
    let mut end = quoted_end(bytes, open, b'\'', true)?;
    while let Some(next) = continuation(bytes, end) {
        end = quoted_end(bytes, next, b'\'', true)?;
    }
    Ok(end)
}

/// Where a string literal that ended at `at` continues: the quote after
/// white space with a newline in it, as PostgreSQL's lexer reads
/// `{quote}{whitespace_with_newline}{quote}`.
fn continuation(bytes: &[u8], at: usize) -> Option<usize> {
    let comment = |i: usize| bytes.get(i) == Some(&b'-') && bytes.get(i + 1) == Some(&b'-');
    let line_end = |i: usize| {
        bytes[i..]
            .iter()
            .position(|&b| b == b'\n' || b == b'\r')
            .map(|n| i + n)
    };
    let mut i = at;
    // Horizontal space and comments, then a newline.
    loop {
        match bytes.get(i) {
            Some(b' ' | b'\t' | b'\x0c') => i += 1,
            Some(b'-') if comment(i) => i = line_end(i)?,
            Some(b'\n' | b'\r') => break,
            _ => return None,
        }
    }
    // Any space, and comments that end with a newline.
    loop {
        match bytes.get(i) {
            Some(b' ' | b'\t' | b'\n' | b'\r' | b'\x0c' | b'\x0b') => i += 1,
            Some(b'-') if comment(i) => i = line_end(i)? + 1,
            Some(b'\'') => return Some(i),
            _ => return None,
        }
    }
}

/// A dollar-quoted string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DollarQuote {
    /// The text between the tags.
    pub body: Range<usize>,
    /// Just past the closing tag.
    pub end: usize,
}

/// If a dollar-quote tag (`$$` or `$tag$`) opens at `open`, the string it
/// opens. A `$` followed by digits is a parameter, not a tag.
pub(crate) fn dollar_quote(sql: &str, open: usize) -> Option<Result<DollarQuote, Unterminated>> {
    let bytes = sql.as_bytes();
    if bytes.get(open) != Some(&b'$') {
        return None;
    }
    let mut tag_end = open + 1;
    if bytes
        .get(tag_end)
        .is_some_and(|&c| c.is_ascii_alphabetic() || c == b'_' || c >= 0x80)
    {
        while bytes
            .get(tag_end)
            .is_some_and(|&c| c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80)
        {
            tag_end += 1;
        }
    }
    if bytes.get(tag_end) != Some(&b'$') {
        return None;
    }
    // Both ends of the tag are `$`, so these slices fall on character
    // boundaries.
    let tag = sql.get(open..=tag_end).unwrap_or_default();
    let body_start = tag_end + 1;
    let rest = sql.get(body_start..).unwrap_or_default();
    Some(match rest.find(tag) {
        Some(length) => Ok(DollarQuote {
            body: body_start..body_start + length,
            end: body_start + length + tag.len(),
        }),
        None => Err(Unterminated),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_comments_end_past_their_newline_or_at_the_end() {
        assert_eq!(comment(b"x -- a; b\ny", 2), Some(Ok(10)));
        assert_eq!(comment(b"-- to the end", 0), Some(Ok(13)));
        assert_eq!(comment(b"- -", 0), None);
    }

    #[test]
    fn block_comments_nest() {
        let sql = b"/* a /* b; */ c */ x";
        assert_eq!(comment(sql, 0), Some(Ok(18)));
        assert_eq!(comment(b"/* a /* b */", 0), Some(Err(Unterminated)));
        assert_eq!(comment(b"/*/", 0), Some(Err(Unterminated)));
    }

    #[test]
    fn doubled_quotes_and_backslashes_stay_inside() {
        assert_eq!(quoted_end(b"'it''s' x", 0, b'\'', false), Ok(7));
        assert_eq!(quoted_end(br#""a""b" x"#, 0, b'"', false), Ok(6));
        assert_eq!(quoted_end(br"'a\'b' x", 0, b'\'', true), Ok(6));
        assert_eq!(quoted_end(br"'a\'b' x", 0, b'\'', false), Ok(4));
        assert_eq!(quoted_end(b"'abc", 0, b'\'', false), Err(Unterminated));
        assert_eq!(quoted_end(br"'abc\", 0, b'\'', true), Err(Unterminated));
    }

    #[test]
    fn dollar_quotes_close_on_their_own_tag() {
        let sql = "$t$ $$ $t$;";
        assert_eq!(
            dollar_quote(sql, 0),
            Some(Ok(DollarQuote {
                body: 3..7,
                end: 10
            }))
        );
        assert_eq!(
            dollar_quote("$$é$$", 0),
            Some(Ok(DollarQuote { body: 2..4, end: 6 }))
        );
        assert_eq!(dollar_quote("$q$ never closed", 0), Some(Err(Unterminated)));
    }

    #[test]
    fn parameters_and_stray_dollars_open_nothing() {
        for sql in ["$1", "$1$", "$ x", "$", "$a-b$"] {
            assert_eq!(dollar_quote(sql, 0), None, "{sql}");
        }
    }
}
