//! What a plain statement does to the session beyond its transaction: the
//! one thing the proxy must know of SQL it passes on, since session state
//! cannot follow a client from one pooled backend connection to another.

use super::split::{quoted_name, tokens, words, Token, TokenKind};
use super::statement_names::name_at;

/// What a passthrough statement does to the session beyond its transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionEffect {
    /// Nothing outlives the transaction: the connection may be pooled.
    None,
    /// Session state (SET, LISTEN, PREPARE, temp tables, session advisory
    /// locks, WITH HOLD cursors, …): the session keeps its backend
    /// connection until it ends.
    Pins,
    /// `DEALLOCATE ALL` / `DISCARD ALL`: every prepared statement on the
    /// connection goes, the proxy's own included, once PostgreSQL answers
    /// it with CommandComplete (one it refused drops nothing); the session
    /// forgets them then (`session::simple`).
    ForgetsPrepared,
    /// `RESET`, `SET … TO DEFAULT`: a setting back to its default leaves
    /// the connection as the pool keeps it once the session's startup
    /// settings are set again after it (`session::settings`), as after
    /// `DISCARD ALL`; a pool's reset on release (`RESET ALL`) keeps its
    /// session poolable.
    ResetsSettings,
}

/// Functions whose effect outlives the transaction.
const PINNING_FUNCTIONS: &[&str] = &[
    "pg_advisory_lock",
    "pg_advisory_lock_shared",
    "pg_try_advisory_lock",
    "pg_try_advisory_lock_shared",
    "set_config",
    "dblink_connect",
    // The backend's random() sequence: seeded for this session only, and
    // its later draws come from the same backend, as on PostgreSQL.
    "setseed",
];

pub fn session_effect(sql: &str) -> SessionEffect {
    if plainly_without_effect(sql) {
        return SessionEffect::None;
    }
    effect_by_tokens(sql)
}

/// `session_effect` from the statement's tokens.
fn effect_by_tokens(sql: &str) -> SessionEffect {
    // One pass of the tokenizer: the words and the literals come from it.
    let toks = tokens(sql);
    let words: Vec<&str> = toks
        .iter()
        .filter(|t| t.kind == TokenKind::Word)
        .map(|t| &sql[t.range.clone()])
        .collect();
    let is = |i: usize, kw: &str| words.get(i).is_some_and(|w| w.eq_ignore_ascii_case(kw));
    // DISCARD PLANS drops cached plans only: the statements stay.
    let forgets = (is(0, "DEALLOCATE") && (is(1, "ALL") || (is(1, "PREPARE") && is(2, "ALL"))))
        || (is(0, "DISCARD") && is(1, "ALL"));
    if forgets {
        return SessionEffect::ForgetsPrepared;
    }
    let back_to_default = || resets(sql).is_some();
    let pins = match words.first() {
        None => false,
        // SET LOCAL and SET TRANSACTION end with the transaction.
        Some(w) if w.eq_ignore_ascii_case("SET") => {
            !(is(1, "LOCAL") || is(1, "TRANSACTION") || back_to_default())
        }
        // RESET ROLE and RESET SESSION AUTHORIZATION set the startup
        // values again (`resets`) and pin: the role is the session's.
        Some(w) if w.eq_ignore_ascii_case("RESET") => {
            !back_to_default() || is(1, "ROLE") || is(1, "SESSION")
        }
        Some(w) if w.eq_ignore_ascii_case("LISTEN") => true,
        Some(w) if w.eq_ignore_ascii_case("PREPARE") => !is(1, "TRANSACTION"),
        Some(w) if w.eq_ignore_ascii_case("LOAD") => true,
        // A DO block's code runs now, and may SET, create temp objects or
        // take session locks in SQL the proxy cannot read.
        Some(w) if w.eq_ignore_ascii_case("DO") => true,
        Some(w) if w.eq_ignore_ascii_case("DECLARE") => words
            .windows(2)
            .any(|p| p[0].eq_ignore_ascii_case("WITH") && p[1].eq_ignore_ascii_case("HOLD")),
        _ => false,
    };
    // Every name as PostgreSQL reads it: `"set_config"`, `U&"…"` and
    // `pg_catalog.set_config` name the function `set_config` too.
    let names: Vec<String> = (0..toks.len())
        .filter_map(|i| name_at(sql, &toks, i))
        .collect();
    let pins = pins || makes_temp_objects(&words, &names, sql, &toks);
    let calls_pinning_function = names
        .iter()
        .any(|n| PINNING_FUNCTIONS.contains(&n.as_str()));
    // `UPDATE pg_settings SET setting = …` is a SET.
    let updates_settings = names.iter().any(|n| n == "pg_settings")
        && words.iter().any(|w| w.eq_ignore_ascii_case("UPDATE"));
    if pins || calls_pinning_function || updates_settings {
        SessionEffect::Pins
    } else if words
        .first()
        .is_some_and(|w| is_any_of(w, &["RESET", "SET"]))
        && back_to_default()
    {
        SessionEffect::ResetsSettings
    } else {
        SessionEffect::None
    }
}

fn is_any_of(word: &str, list: &[&str]) -> bool {
    list.iter().any(|k| word.eq_ignore_ascii_case(k))
}

/// First words of the statements `session_effect` judges by their first
/// words.
const EFFECT_FIRST_WORDS: &[&str] = &[
    "DEALLOCATE",
    "DISCARD",
    "SET",
    "RESET",
    "LISTEN",
    "PREPARE",
    "LOAD",
    "DO",
    "DECLARE",
];

/// Whether a statement has no session effect, decided without tokenizing
/// it (most statements, and the ones a busy client sends): its first word
/// starts none of the statements that have one, and no word that could
/// give it one appears anywhere in its text — `temp` (TEMP, TEMPORARY,
/// pg_temp), a part of every `PINNING_FUNCTIONS` name, `pg_settings`, nor
/// a `U&"…"` identifier, which can spell any of them. A text where one does
/// appear, in a literal or a comment too, takes the full look.
fn plainly_without_effect(sql: &str) -> bool {
    let Some(first) = words(sql).next() else {
        return false;
    };
    if EFFECT_FIRST_WORDS
        .iter()
        .any(|w| first.eq_ignore_ascii_case(w))
    {
        return false;
    }
    let bytes = sql.as_bytes();
    let at = |i: usize, needle: &[u8]| {
        bytes
            .get(i..i + needle.len())
            .is_some_and(|w| w.eq_ignore_ascii_case(needle))
    };
    !(0..bytes.len()).any(|i| match bytes[i].to_ascii_lowercase() {
        b't' => at(i, b"temp"),
        b'a' => at(i, b"advisory_lock"),
        b's' => at(i, b"set_config") || at(i, b"setseed"),
        b'd' => at(i, b"dblink_connect"),
        b'p' => at(i, b"pg_settings"),
        b'u' => at(i, b"u&\""),
        _ => false,
    })
}

/// Words before TEMP / TEMPORARY where it is the keyword (`CREATE [OR
/// REPLACE] [GLOBAL | LOCAL] TEMP …`, `SELECT … INTO TEMP t`), and words
/// after it (`TEMP TABLE | SEQUENCE | VIEW | RECURSIVE VIEW`); a column
/// named `temp` is neither.
const BEFORE_TEMP: &[&str] = &["CREATE", "REPLACE", "GLOBAL", "LOCAL", "INTO"];
const AFTER_TEMP: &[&str] = &["TABLE", "SEQUENCE", "VIEW", "RECURSIVE"];

/// Whether the statement may create temporary objects, which only their
/// session may ever see: the TEMP keyword, or the `pg_temp` schema named
/// in any form (`pg_temp.f`, `"pg_temp"`, `pg_temp_3`). Errs on the side
/// of pinning.
fn makes_temp_objects(words: &[&str], names: &[String], sql: &str, toks: &[Token]) -> bool {
    let is_any = |w: &str, list: &[&str]| list.iter().any(|k| w.eq_ignore_ascii_case(k));
    let temp_keyword = words.iter().enumerate().any(|(i, w)| {
        (w.eq_ignore_ascii_case("TEMP") || w.eq_ignore_ascii_case("TEMPORARY"))
            && ((i > 0 && is_any(words[i - 1], BEFORE_TEMP))
                || words
                    .get(i + 1)
                    .is_some_and(|next| is_any(next, AFTER_TEMP)))
    });
    if temp_keyword {
        return true;
    }
    // Folded, quoted or `U&"…"`: `pg_temp`, `pg_temp_3`.
    let names_temp_schema = names.iter().any(|n| n.starts_with("pg_temp"));
    let do_block_mentions_temp = words.first().is_some_and(|w| w.eq_ignore_ascii_case("DO"))
        && toks.iter().any(|t| {
            t.kind == TokenKind::Quoted
                && sql[t.range.clone()].to_ascii_lowercase().contains("temp")
        });
    names_temp_schema || do_block_mentions_temp
}

/// Settings a statement puts back to their defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resets {
    /// `RESET ALL`, `DISCARD ALL`.
    All,
    /// `RESET name`, `SET [SESSION] name TO DEFAULT` (lower case).
    Setting(String),
}

/// What the statement resets, if anything. A later `SET name` of the same
/// exchange is [`sets_setting`].
pub fn resets(sql: &str) -> Option<Resets> {
    let toks = tokens(sql);
    let parts: Vec<(TokenKind, &str)> = toks
        .iter()
        .filter(|t| t.kind != TokenKind::Semicolon)
        .map(|t| (t.kind, &sql[t.range.clone()]))
        .collect();
    let word = |i: usize, kw: &str| {
        parts
            .get(i)
            .is_some_and(|(k, w)| *k == TokenKind::Word && w.eq_ignore_ascii_case(kw))
    };
    let part_at = |i: usize| -> Option<String> {
        match parts.get(i)? {
            (TokenKind::Word, w) => Some(w.to_ascii_lowercase()),
            (TokenKind::Quoted, w) => quoted_name(w),
            _ => None,
        }
    };
    // A setting's name, with the index after it: `a`, or a custom
    // setting's `a.b` (`my_app.tenant`).
    let name_at = |i: usize| -> Option<(String, usize)> {
        let mut name = part_at(i)?;
        let mut next = i + 1;
        while parts.get(next).is_some_and(|(_, w)| *w == ".") {
            let Some(more) = part_at(next + 1) else { break };
            name = format!("{name}.{more}");
            next += 2;
        }
        Some((name, next))
    };
    if word(0, "DISCARD") && word(1, "ALL") {
        return Some(Resets::All);
    }
    // TIME ZONE is the SQL standard's spelling of timezone.
    let time_zone_at = |i: usize| word(i, "TIME") && word(i + 1, "ZONE");
    if word(0, "RESET") {
        if word(1, "ALL") {
            return Some(Resets::All);
        }
        if time_zone_at(1) {
            return Some(Resets::Setting("timezone".into()));
        }
        // Back to the session's role as it began: the startup `role` (or
        // `session_authorization`), if the client gave one.
        if word(1, "ROLE") && parts.len() == 2 {
            return Some(Resets::Setting("role".into()));
        }
        if word(1, "SESSION") {
            let whole = word(2, "AUTHORIZATION") && parts.len() == 3;
            return whole.then(|| Resets::Setting("session_authorization".into()));
        }
        return name_at(1).map(|(name, _)| Resets::Setting(name));
    }
    if word(0, "SET") {
        let at = if word(1, "SESSION") { 2 } else { 1 };
        if word(1, "LOCAL") {
            return None;
        }
        if time_zone_at(at) {
            let value = at + 2;
            let default =
                (word(value, "DEFAULT") || word(value, "LOCAL")) && parts.len() == value + 1;
            return default.then(|| Resets::Setting("timezone".into()));
        }
        let (name, value_at) = name_at(at)?;
        let to = word(value_at, "TO") || parts.get(value_at).is_some_and(|(_, w)| *w == "=");
        if to && word(value_at + 1, "DEFAULT") && parts.len() == value_at + 2 {
            return Some(Resets::Setting(name));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_quick_look_never_passes_what_the_tokens_would_not() {
        use super::*;
        // Every pinning function and temp object is left to the full look.
        for f in PINNING_FUNCTIONS {
            for sql in [
                format!("SELECT {f}(1)"),
                format!("select x.{}()", f.to_uppercase()),
            ] {
                assert!(!plainly_without_effect(&sql), "{sql}");
                assert_eq!(session_effect(&sql), SessionEffect::Pins, "{sql}");
            }
        }
        let statements = [
            "SELECT 1",
            "UPDATE pgbench_accounts SET abalance = abalance + -4711 WHERE aid = 42",
            "INSERT INTO t VALUES ('temp')",
            "SELECT 'set_config' AS s -- advisory_lock",
            "CREATE TEMP TABLE t (a int)",
            "create temporary view v as select 1",
            "SELECT * INTO TEMP x FROM y",
            "SELECT * FROM pg_temp.t",
            "SELECT * FROM \"pg_temp_3\".t",
            "/* c */ SET search_path = x",
            "  set local a = 1",
            "DO $$ BEGIN CREATE TEMP TABLE q (); END $$",
            "DECLARE c CURSOR WITH HOLD FOR SELECT 1",
            "DISCARD ALL",
            "WITH a AS (SELECT 1) SELECT * FROM a",
            "SELECT tempo, attempts FROM t",
            "SELECT \"pg_advisory_lock\"(1)",
            "SELECT U&\"pg\\005Fadvisory\\005Flock\"(1)",
            "SELECT * FROM pg_settings",
            "UPDATE pg_settings SET setting = 'x' WHERE name = 'search_path'",
            "",
            "-- only a comment",
        ];
        for sql in statements {
            if plainly_without_effect(sql) {
                assert_eq!(effect_by_tokens(sql), SessionEffect::None, "{sql}");
            }
            assert_eq!(session_effect(sql), effect_by_tokens(sql), "{sql}");
        }
        // The common statements take the quick look.
        assert!(plainly_without_effect(
            "SELECT abalance FROM pgbench_accounts WHERE aid = 7"
        ));
        assert!(plainly_without_effect(
            "INSERT INTO h (tid, bid) VALUES (1, 2)"
        ));
    }
}
