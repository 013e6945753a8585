//! Plain SQL that goes to PostgreSQL unchanged, and what the session must
//! know of it besides its session effect (`effect.rs`): a DEALLOCATE of the
//! client's own name, a LISTEN the shared listening connection can serve,
//! transaction control, the settings it sets or resets.

use super::split::{quoted_name, words, TokenKind};

pub use super::effect::{resets, session_effect, Resets, SessionEffect};

/// `DEALLOCATE [PREPARE] name` of one statement: the client's name, which
/// the backend does not know (statements live there under proxy-global
/// names), so the proxy answers it.
pub fn deallocated_name(sql: &str) -> Option<String> {
    // Lazily: most statements stop at their first word.
    let mut words =
        super::split::Tokens::new(sql).filter(|t| t.kind != super::split::TokenKind::Semicolon);
    let first = words.next()?;
    if !sql[first.range.clone()].eq_ignore_ascii_case("DEALLOCATE") {
        return None;
    }
    let mut next = words.next()?;
    if sql[next.range.clone()].eq_ignore_ascii_case("PREPARE") {
        next = words.next()?;
    }
    if words.next().is_some() {
        return None;
    }
    let text = &sql[next.range.clone()];
    if text.eq_ignore_ascii_case("ALL") {
        return None;
    }
    Some(match next.kind {
        // An unterminated name (`DEALLOCATE "`) is PostgreSQL's syntax
        // error to report, not a name.
        super::split::TokenKind::Quoted => super::split::quoted_name(text)?,
        super::split::TokenKind::Word => text.to_lowercase(),
        _ => return None,
    })
}

/// The setting a session-level `SET name …` (not to DEFAULT) changes.
pub fn sets_setting(sql: &str) -> Option<String> {
    let words: Vec<&str> = words(sql).collect();
    let is = |i: usize, kw: &str| words.get(i).is_some_and(|w| w.eq_ignore_ascii_case(kw));
    if !is(0, "SET") || is(1, "LOCAL") || is(1, "TRANSACTION") || resets(sql).is_some() {
        return None;
    }
    let at = if is(1, "SESSION") { 2 } else { 1 };
    if is(at, "TIME") && is(at + 1, "ZONE") {
        return Some("timezone".into());
    }
    words.get(at).map(|w| w.to_ascii_lowercase())
}

/// A LISTEN or UNLISTEN that the proxy can serve from its shared
/// listening connection: exactly `LISTEN name`, `UNLISTEN name` or
/// `UNLISTEN *`, the name a plain or double-quoted identifier of at most 63
/// bytes (as PostgreSQL stores it: plain names folded to lower case).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listening {
    Listen(String),
    /// `None`: `UNLISTEN *`.
    Unlisten(Option<String>),
}

/// PostgreSQL's longest identifier (NAMEDATALEN - 1).
const MAX_IDENTIFIER_BYTES: usize = 63;

pub fn listening(sql: &str) -> Option<Listening> {
    // Lazily: most statements stop at their first word.
    let mut toks = super::split::Tokens::new(sql);
    let verb = toks.next()?;
    if verb.kind != TokenKind::Word {
        return None;
    }
    let verb = &sql[verb.range.clone()];
    if !verb.eq_ignore_ascii_case("LISTEN") && !verb.eq_ignore_ascii_case("UNLISTEN") {
        return None;
    }
    let name = toks.next()?;
    if toks.next().is_some() {
        return None;
    }
    let text = &sql[name.range.clone()];
    let name = match name.kind {
        // (`U&"…"` is three tokens: never taken.)
        TokenKind::Word => Some(text.to_ascii_lowercase()),
        TokenKind::Quoted => quoted_name(text),
        TokenKind::Other if text == "*" && verb.eq_ignore_ascii_case("UNLISTEN") => {
            return Some(Listening::Unlisten(None));
        }
        _ => None,
    }?;
    if name.len() > MAX_IDENTIFIER_BYTES {
        return None;
    }
    if verb.eq_ignore_ascii_case("LISTEN") {
        Some(Listening::Listen(name))
    } else if verb.eq_ignore_ascii_case("UNLISTEN") {
        Some(Listening::Unlisten(Some(name)))
    } else {
        None
    }
}

/// A statement that opens, ends or marks a transaction block, as far as
/// the proxy must follow the block (LISTEN / UNLISTEN inside one take
/// effect at its COMMIT, and not at all where a ROLLBACK undoes them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Control {
    /// `BEGIN`, `START TRANSACTION`.
    Begin,
    /// `COMMIT`, `END` (`chain`: `AND CHAIN`, a new block follows).
    Commit { chain: bool },
    /// `ROLLBACK`, `ABORT`.
    Rollback { chain: bool },
    /// `SAVEPOINT name` (names as PostgreSQL stores them).
    Savepoint(String),
    /// `RELEASE [SAVEPOINT] name`.
    Release(String),
    /// `ROLLBACK [WORK | TRANSACTION] TO [SAVEPOINT] name`.
    RollbackTo(String),
    /// `PREPARE TRANSACTION 'id'`.
    Prepare,
}

impl Control {
    /// Whether `tag` (a CommandComplete's) is the one PostgreSQL answers a
    /// control statement with; a COMMIT of a failed block answers ROLLBACK.
    pub fn is_control_tag(tag: &[u8]) -> bool {
        matches!(
            tag,
            b"BEGIN"
                | b"START TRANSACTION"
                | b"COMMIT"
                | b"ROLLBACK"
                | b"SAVEPOINT"
                | b"RELEASE"
                | b"PREPARE TRANSACTION"
        )
    }
}

/// The command tag of `sql` when it opens a transaction block with no
/// options at all (`BEGIN [WORK | TRANSACTION]`, `START TRANSACTION`): on
/// a connection outside a block such a statement cannot fail, so the
/// proxy may answer it before PostgreSQL has (`session::simple`). With
/// options (an isolation level, READ WRITE on a standby, DEFERRABLE) it
/// can, and it is not this.
pub fn plain_begin(sql: &str) -> Option<&'static str> {
    let toks = super::split::Tokens::new(sql).filter(|t| t.kind != TokenKind::Semicolon);
    let mut words = [""; 3];
    let mut n = 0;
    for t in toks {
        if t.kind != TokenKind::Word || n == words.len() {
            return None;
        }
        words[n] = &sql[t.range];
        n += 1;
    }
    let is = |i: usize, w: &str| words[i].eq_ignore_ascii_case(w);
    match n {
        1 if is(0, "BEGIN") => Some("BEGIN"),
        2 if is(0, "BEGIN") && (is(1, "WORK") || is(1, "TRANSACTION")) => Some("BEGIN"),
        2 if is(0, "START") && is(1, "TRANSACTION") => Some("START TRANSACTION"),
        _ => None,
    }
}

/// The transaction control `sql` is, if it is one.
pub fn transaction_control(sql: &str) -> Option<Control> {
    // Lazily: most statements stop at their first word.
    let mut toks = super::split::Tokens::new(sql).filter(|t| t.kind != TokenKind::Semicolon);
    let first = toks.next()?;
    if first.kind != TokenKind::Word {
        return None;
    }
    let verb = &sql[first.range.clone()];
    let is = |w: &str| verb.eq_ignore_ascii_case(w);
    if !(is("BEGIN")
        || is("START")
        || is("COMMIT")
        || is("END")
        || is("ROLLBACK")
        || is("ABORT")
        || is("SAVEPOINT")
        || is("RELEASE")
        || is("PREPARE"))
    {
        return None;
    }
    let rest: Vec<_> = toks.collect();
    let word = |i: usize, kw: &str| {
        rest.get(i).is_some_and(|t| {
            t.kind == TokenKind::Word && sql[t.range.clone()].eq_ignore_ascii_case(kw)
        })
    };
    let name = |i: usize| -> Option<String> {
        let t = rest.get(i)?;
        if i + 1 != rest.len() {
            return None;
        }
        let text = &sql[t.range.clone()];
        match t.kind {
            TokenKind::Word => Some(text.to_ascii_lowercase()),
            TokenKind::Quoted => quoted_name(text),
            _ => None,
        }
    };
    let chain = rest.len() >= 2 && word(rest.len() - 1, "CHAIN") && word(rest.len() - 2, "AND");
    if is("BEGIN") {
        return Some(Control::Begin);
    }
    if is("START") {
        return word(0, "TRANSACTION").then_some(Control::Begin);
    }
    if is("COMMIT") || is("END") {
        // COMMIT PREPARED ends no block of this session's.
        return (!word(0, "PREPARED")).then_some(Control::Commit { chain });
    }
    if is("ROLLBACK") || is("ABORT") {
        if word(0, "PREPARED") {
            return None;
        }
        let mut i = usize::from(word(0, "WORK") || word(0, "TRANSACTION"));
        if word(i, "TO") {
            i += 1;
            if word(i, "SAVEPOINT") && rest.len() > i + 1 {
                i += 1;
            }
            return name(i).map(Control::RollbackTo);
        }
        return Some(Control::Rollback { chain });
    }
    if is("SAVEPOINT") {
        return name(0).map(Control::Savepoint);
    }
    if is("RELEASE") {
        let i = usize::from(word(0, "SAVEPOINT") && rest.len() > 1);
        return name(i).map(Control::Release);
    }
    // PREPARE TRANSACTION 'id' (PREPARE name AS … prepares a statement).
    (word(0, "TRANSACTION") && rest.len() == 2).then_some(Control::Prepare)
}

#[cfg(test)]
mod tests {

    #[test]
    fn listen_statements_the_proxy_can_serve() {
        use super::Listening::*;
        assert_eq!(listening("LISTEN Jobs"), Some(Listen("jobs".into())));
        assert_eq!(
            listening("listen \"Mixed \"\"x\"\"\""),
            Some(Listen("Mixed \"x\"".into()))
        );
        assert_eq!(
            listening("/* c */ UNLISTEN jobs "),
            Some(Unlisten(Some("jobs".into())))
        );
        assert_eq!(listening("UNLISTEN *"), Some(Unlisten(None)));
        assert_eq!(listening("LISTEN *"), None);
        assert_eq!(listening("LISTEN a b"), None);
        assert_eq!(listening("LISTEN"), None);
        assert_eq!(listening("LISTEN ''"), None);
        assert_eq!(listening("LISTEN \"\""), None);
        assert_eq!(listening("LISTEN U&\"d\\0061t\""), None);
        assert_eq!(listening(&format!("LISTEN {}", "x".repeat(64))), None);
        assert_eq!(listening("NOTIFY jobs"), None);
    }

    use super::*;

    #[test]
    fn transaction_scoped_statements_do_not_pin() {
        for sql in [
            "SELECT 1",
            "BEGIN",
            "SET LOCAL statement_timeout = 5",
            "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE",
            "SELECT pg_advisory_xact_lock(1)",
            "INSERT INTO t VALUES ('SET x = 1')",
            "CREATE TABLE temp_things (id int)",
            "SELECT temp FROM weather",
            "SELECT 'CREATE TEMP TABLE x'",
            "CREATE TABLE t (temp int)",
            "DECLARE c CURSOR FOR SELECT 1",
            "PREPARE TRANSACTION 'x'",
        ] {
            assert_eq!(session_effect(sql), SessionEffect::None, "{sql}");
        }
    }

    #[test]
    fn resets_are_recognised() {
        let one = |n: &str| Some(Resets::Setting(n.into()));
        assert_eq!(resets("RESET ALL"), Some(Resets::All));
        assert_eq!(resets("discard all;"), Some(Resets::All));
        assert_eq!(resets("RESET DateStyle"), one("datestyle"));
        assert_eq!(resets("RESET \"TimeZone\""), one("TimeZone"));
        assert_eq!(resets("SET datestyle TO DEFAULT"), one("datestyle"));
        assert_eq!(resets("SET SESSION timezone = DEFAULT"), one("timezone"));
        assert_eq!(resets("SET LOCAL timezone TO DEFAULT"), None);
        assert_eq!(resets("SET datestyle TO 'ISO'"), None);
        assert_eq!(resets("RESET ROLE"), one("role"));
        assert_eq!(
            resets("RESET SESSION AUTHORIZATION"),
            one("session_authorization")
        );
        assert_eq!(resets("RESET my_app.tenant"), one("my_app.tenant"));
        assert_eq!(resets("RESET \"my_app\".tenant"), one("my_app.tenant"));
        assert_eq!(resets("SET my_app.tenant TO DEFAULT"), one("my_app.tenant"));
        assert_eq!(resets("SET my_app.tenant TO 'x'"), None);
        assert_eq!(resets("SELECT 1"), None);
        assert_eq!(resets("RESET TIME ZONE"), one("timezone"));
        assert_eq!(resets("SET TIME ZONE LOCAL"), one("timezone"));
        assert_eq!(resets("SET TIME ZONE DEFAULT"), one("timezone"));
        assert_eq!(resets("SET TIME ZONE 'UTC'"), None);
        assert_eq!(sets_setting("SET TIME ZONE 'UTC'"), Some("timezone".into()));
        assert_eq!(
            sets_setting("SET DateStyle TO 'SQL'"),
            Some("datestyle".into())
        );
        assert_eq!(sets_setting("SET LOCAL DateStyle TO 'SQL'"), None);
        assert_eq!(sets_setting("SET datestyle TO DEFAULT"), None);
    }

    #[test]
    fn an_unterminated_quoted_name_is_no_name_to_any_classifier() {
        // The token runs to the end of the text, here inside a two-byte
        // character: no classifier may cut it as if it were closed.
        for sql in [
            "SET\"<\0,receiLI\u{0572}",
            "RESET \"abc\u{0572}",
            "SET \"a\"\" TO DEFAULT",
            "RESET \"\"",
        ] {
            assert_eq!(resets(sql), None, "{sql}");
            let _ = sets_setting(sql);
            let _ = session_effect(sql);
            let _ = transaction_control(sql);
        }
        assert_eq!(deallocated_name("DEALLOCATE \"a\u{0572}"), None);
        assert_eq!(deallocated_name("DEALLOCATE \"\""), None);
        assert_eq!(listening("LISTEN \"a\u{0572}"), None);
        assert_eq!(
            listening("LISTEN \"a\"\"b\""),
            Some(Listening::Listen("a\"b".into()))
        );
        assert_eq!(
            resets("RESET \"a\"\"b\""),
            Some(Resets::Setting("a\"b".into()))
        );
    }

    #[test]
    fn deallocation_is_recognised() {
        assert_eq!(
            session_effect("DEALLOCATE ALL"),
            SessionEffect::ForgetsPrepared
        );
        assert_eq!(
            session_effect("deallocate prepare all"),
            SessionEffect::ForgetsPrepared
        );
        assert_eq!(
            session_effect("DISCARD ALL"),
            SessionEffect::ForgetsPrepared
        );
        assert_eq!(session_effect("DISCARD PLANS"), SessionEffect::None);
        assert_eq!(deallocated_name("DEALLOCATE _pg3_0"), Some("_pg3_0".into()));
        assert_eq!(
            deallocated_name("DEALLOCATE PREPARE \"S 1\";"),
            Some("S 1".into())
        );
        assert_eq!(deallocated_name("DEALLOCATE ALL"), None);
        assert_eq!(deallocated_name("DEALLOCATE \""), None);
        assert_eq!(deallocated_name("DEALLOCATE \"abc"), None);
        assert_eq!(deallocated_name("SELECT 1"), None);
    }

    #[test]
    fn session_state_pins() {
        for sql in [
            "SET search_path = public",
            "set TimeZone to 'UTC'",
            "RESET ROLE",
            "RESET SESSION AUTHORIZATION",
            "LISTEN jobs",
            "PREPARE p AS SELECT 1",
            "CREATE TEMP TABLE t (id int)",
            "CREATE LOCAL TEMPORARY TABLE t (id int)",
            "CREATE GLOBAL TEMP TABLE t (id int)",
            "create temporary sequence s",
            "CREATE TEMP VIEW v AS SELECT 1",
            "CREATE OR REPLACE TEMP VIEW v AS SELECT 1",
            "CREATE TEMP RECURSIVE VIEW v (n) AS SELECT 1",
            "SELECT 1 AS x INTO TEMP t",
            "SELECT 1 AS x INTO TEMPORARY TABLE t",
            "CREATE TABLE pg_temp.t (id int)",
            "CREATE FUNCTION pg_temp.f() RETURNS int LANGUAGE sql AS 'SELECT 1'",
            "CREATE VIEW \"pg_temp\".v AS SELECT 1",
            "CREATE TABLE pg_temp_3.t (id int)",
            "ALTER TABLE pg_temp.t ADD COLUMN x int",
            "DO $$ BEGIN EXECUTE 'CREATE TEMP TABLE t (id int)'; END $$",
            "DO 'BEGIN CREATE TEMPORARY TABLE t (id int); END'",
            "DO $$ BEGIN SET enable_bitmapscan = off; END $$",
            "DO $$ BEGIN PERFORM 1; END $$",
            "DECLARE c CURSOR WITH HOLD FOR SELECT 1",
            "SELECT pg_advisory_lock(42)",
            "SELECT set_config('a.b', 'c', false)",
            "SELECT setseed(0.5)",
            "LOAD 'auto_explain'",
            // Names as PostgreSQL reads them, however spelled.
            "SELECT \"pg_advisory_lock\"(4711)",
            "SELECT pg_catalog.\"pg_advisory_lock\"(4711)",
            "SELECT U&\"pg\\005Fadvisory\\005Flock\"(4712)",
            "SELECT \"set_config\"('work_mem', '33MB', false)",
            "SELECT \"pg_catalog\".\"set_config\"('work_mem', '33MB', false)",
            "SELECT u&\"set!005Fconfig\" UESCAPE '!' ('DateStyle', 'German', false)",
            "CREATE TABLE U&\"pg\\005Ftemp\".secret_t AS SELECT 1",
            "UPDATE pg_settings SET setting = 'x' WHERE name = 'search_path'",
            "update pg_catalog.pg_settings set setting = 'x' where name = 'work_mem'",
            "WITH s AS (SELECT 1) UPDATE \"pg_settings\" SET setting = 'x' WHERE name = 'work_mem'",
        ] {
            assert_eq!(session_effect(sql), SessionEffect::Pins, "{sql}");
        }
    }

    #[test]
    fn settings_put_back_to_their_defaults_do_not_pin() {
        for sql in [
            "RESET ALL",
            "reset datestyle",
            "RESET TIME ZONE",
            "SET datestyle TO DEFAULT",
            "SET SESSION timezone = DEFAULT",
            "SET TIME ZONE LOCAL",
        ] {
            assert_eq!(session_effect(sql), SessionEffect::ResetsSettings, "{sql}");
        }
    }

    #[test]
    fn plain_begins_are_the_optionless_ones() {
        assert_eq!(plain_begin("BEGIN"), Some("BEGIN"));
        assert_eq!(plain_begin("begin;"), Some("BEGIN"));
        assert_eq!(plain_begin("  BEGIN /* c */ WORK ;"), Some("BEGIN"));
        assert_eq!(plain_begin("Begin Transaction"), Some("BEGIN"));
        assert_eq!(plain_begin("START TRANSACTION"), Some("START TRANSACTION"));
        for other in [
            "BEGIN ISOLATION LEVEL SERIALIZABLE",
            "BEGIN READ WRITE",
            "START TRANSACTION READ ONLY",
            "BEGIN WORK WORK",
            "START",
            "BEGIN; SELECT 1",
            "\"BEGIN\"",
            "COMMIT",
            "",
        ] {
            assert_eq!(plain_begin(other), None, "{other}");
        }
    }

    #[test]
    fn transaction_control_statements() {
        use super::Control::*;
        let cases = [
            ("BEGIN", Some(Begin)),
            ("begin isolation level serializable", Some(Begin)),
            ("START TRANSACTION READ ONLY", Some(Begin)),
            ("COMMIT", Some(Commit { chain: false })),
            ("end work;", Some(Commit { chain: false })),
            ("COMMIT AND CHAIN", Some(Commit { chain: true })),
            ("COMMIT AND NO CHAIN", Some(Commit { chain: false })),
            ("ROLLBACK", Some(Rollback { chain: false })),
            (
                "abort transaction and chain",
                Some(Rollback { chain: true }),
            ),
            ("ROLLBACK TO s1", Some(RollbackTo("s1".into()))),
            (
                "ROLLBACK WORK TO SAVEPOINT \"S 1\"",
                Some(RollbackTo("S 1".into())),
            ),
            (
                "ROLLBACK TO savepoint",
                Some(RollbackTo("savepoint".into())),
            ),
            ("SAVEPOINT Mark", Some(Savepoint("mark".into()))),
            ("RELEASE SAVEPOINT mark", Some(Release("mark".into()))),
            ("RELEASE mark", Some(Release("mark".into()))),
            ("PREPARE TRANSACTION 'x'", Some(Prepare)),
            ("PREPARE q AS SELECT 1", None),
            ("COMMIT PREPARED 'x'", None),
            ("ROLLBACK PREPARED 'x'", None),
            ("SELECT 1", None),
            ("STARTX", None),
        ];
        for (sql, want) in cases {
            assert_eq!(transaction_control(sql), want, "{sql}");
        }
    }
}
