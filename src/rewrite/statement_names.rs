//! The prepared statements a plain SQL statement names: `PREPARE name`,
//! `EXECUTE name` (alone, after EXPLAIN, in `CREATE TABLE … AS EXECUTE`)
//! and `DEALLOCATE [PREPARE] name`, each name as PostgreSQL reads it:
//! plain ones folded to lower case, quoted ones as spelled, `U&"…"` ones
//! decoded. The proxy keeps clients' SQL away from the names it gives
//! their protocol-level statements on backend connections.
//!
//! Words are read wherever they stand outside literals and comments:
//! `GRANT EXECUTE ON …` names a statement `on` here, which is harmless —
//! only names with the proxy's random prefix matter to the caller. SQL that
//! a function or a DO block runs (`EXECUTE 'DEALLOCATE …'` in PL/pgSQL) is
//! a literal, and not read.

use super::split::{quoted_name, tokens, Token, TokenKind};

/// How a statement names a prepared statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NamedBy {
    Prepare,
    Execute,
    Deallocate,
}

/// Every prepared statement `sql` names, in order.
pub fn named_statements(sql: &str) -> Vec<(NamedBy, String)> {
    let toks = tokens(sql);
    let word = |i: usize, kw: &str| {
        toks.get(i).is_some_and(|t| {
            t.kind == TokenKind::Word && sql[t.range.clone()].eq_ignore_ascii_case(kw)
        })
    };
    let mut named = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        let (by, at) = if word(i, "DEALLOCATE") {
            let at = if word(i + 1, "PREPARE") { i + 2 } else { i + 1 };
            (NamedBy::Deallocate, at)
        } else if word(i, "EXECUTE") {
            (NamedBy::Execute, i + 1)
        } else if word(i, "PREPARE") {
            (NamedBy::Prepare, i + 1)
        } else {
            i += 1;
            continue;
        };
        if let Some(name) = name_at(sql, &toks, at) {
            named.push((by, name));
        }
        i = at;
    }
    named
}

/// The identifier at token `i`, if one starts there.
pub(super) fn name_at(sql: &str, toks: &[Token], i: usize) -> Option<String> {
    let t = toks.get(i)?;
    let text = &sql[t.range.clone()];
    if unicode_identifier_at(sql, toks, i) {
        return unicode_name_at(sql, toks, i);
    }
    match t.kind {
        TokenKind::Word => Some(text.to_ascii_lowercase()),
        TokenKind::Quoted if text.starts_with('"') => quoted_name(text),
        _ => None,
    }
}

/// Whether a `U&"…"` identifier starts at token `i`: three tokens to the
/// scanner (`U`, `&` and the quoted part) with nothing between them.
fn unicode_identifier_at(sql: &str, toks: &[Token], i: usize) -> bool {
    let (Some(u), Some(amp), Some(quoted)) = (toks.get(i), toks.get(i + 1), toks.get(i + 2)) else {
        return false;
    };
    u.range.end == amp.range.start
        && amp.range.end == quoted.range.start
        && sql[u.range.clone()].eq_ignore_ascii_case("U")
        && &sql[amp.range.clone()] == "&"
        && sql[quoted.range.clone()].starts_with('"')
}

/// The `U&"…"` identifier at token `i`, decoded with its `UESCAPE 'c'` if
/// it has one; `None` where PostgreSQL reports an error.
fn unicode_name_at(sql: &str, toks: &[Token], i: usize) -> Option<String> {
    let inner = quoted_name(&sql[toks.get(i + 2)?.range.clone()])?;
    let uescape = toks
        .get(i + 3)
        .is_some_and(|t| sql[t.range.clone()].eq_ignore_ascii_case("UESCAPE"));
    let escape = if uescape {
        let literal = &sql[toks.get(i + 4)?.range.clone()];
        let mut chars = literal.strip_prefix('\'')?.strip_suffix('\'')?.chars();
        match (chars.next(), chars.next()) {
            (Some(c), None) => c,
            _ => return None,
        }
    } else {
        '\\'
    };
    unicode_unescape(&inner, escape)
}

/// PostgreSQL's Unicode escapes: `\XXXX`, `\+XXXXXX`, `\\` (with `escape`
/// for `\`); `None` where it reports an error (or for a surrogate pair,
/// which spells no name the proxy gives).
fn unicode_unescape(text: &str, escape: char) -> Option<String> {
    if escape.is_ascii_hexdigit() || "+'\" \t\n\r\x0c".contains(escape) {
        return None;
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != escape {
            out.push(c);
            continue;
        }
        if chars.peek() == Some(&escape) {
            chars.next();
            out.push(escape);
            continue;
        }
        let digits = if chars.peek() == Some(&'+') {
            chars.next();
            6
        } else {
            4
        };
        let hex: String = (0..digits).map_while(|_| chars.next()).collect();
        if hex.len() != digits || !hex.chars().all(|h| h.is_ascii_hexdigit()) {
            return None;
        }
        out.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::NamedBy::*;
    use super::*;

    fn named(sql: &str) -> Vec<(NamedBy, String)> {
        named_statements(sql)
    }

    #[test]
    fn names_are_read_as_postgresql_reads_them() {
        let one = |by, name: &str| vec![(by, name.to_string())];
        assert_eq!(named("DEALLOCATE Qw_A_1"), one(Deallocate, "qw_a_1"));
        assert_eq!(named("deallocate prepare \"QW\""), one(Deallocate, "QW"));
        assert_eq!(named("EXECUTE p(1, 'x')"), one(Execute, "p"));
        assert_eq!(named("explain (analyze) execute p"), one(Execute, "p"));
        assert_eq!(
            named("CREATE TABLE t AS EXECUTE \"a\"\"b\""),
            one(Execute, "a\"b")
        );
        assert_eq!(named("PREPARE p (int) AS SELECT $1"), one(Prepare, "p"));
        assert_eq!(named("DEALLOCATE U&\"\\0071w\""), one(Deallocate, "qw"));
        assert_eq!(
            named("DEALLOCATE u&\"!+000071w!!\" UESCAPE '!'"),
            one(Deallocate, "qw!")
        );
        assert_eq!(named("EXECUTE /* c */ p"), one(Execute, "p"));
    }

    #[test]
    fn literals_and_other_words_name_nothing_here() {
        assert_eq!(named("SELECT 'EXECUTE p'"), vec![]);
        assert_eq!(named("DO $$ BEGIN EXECUTE 'DEALLOCATE p'; END $$"), vec![]);
        assert_eq!(named("EXECUTE 'p'"), vec![]);
        assert_eq!(named("DEALLOCATE"), vec![]);
        assert_eq!(named("DEALLOCATE U&\"\\00\""), vec![]);
        assert_eq!(named("DEALLOCATE U&\"x\" UESCAPE 'a'"), vec![]);
        assert_eq!(
            named("DEALLOCATE U & \"x\""),
            vec![(Deallocate, "u".into())]
        );
        assert_eq!(
            named("PREPARE TRANSACTION 'x'"),
            vec![(Prepare, "transaction".into())]
        );
    }
}
