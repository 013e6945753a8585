//! The queenwire dialect grammar (the contract is `docs/dialect.md`; it is normative).
//!
//! [`parse`] decides first whether a statement is ours at all, from its first
//! one or two words; anything else goes to PostgreSQL untouched, so ordinary
//! SQL is never swallowed. A dialect statement is then parsed by its family's
//! module — each owns its grammar, its parameters and its result columns:
//!
//! | statements                                      | module          |
//! |-------------------------------------------------|-----------------|
//! | `PUSH`                                          | [`push`]        |
//! | `POP`                                           | [`pop`]         |
//! | `ACK`, `RENEW`                                  | [`ack`]         |
//! | `CREATE/ALTER/DROP QUEUE`, `SEEK/DROP GROUP`    | [`queue_admin`] |
//! | `SHOW QUEUES/PARTITIONS/GROUPS/DLQ`             | [`show`]        |
//! | `SHOW MESSAGES`, `SHOW MESSAGE`, `SHOW TRACE`   | [`browse`]      |
//! | `SHOW GROUP`, `SHOW LAGGING PARTITIONS`,        | [`groups`]      |
//! | `ALTER GROUP … ON … SUBSCRIBE FROM`             |                 |
//! | `REPLAY DLQ`                                    | [`replay`]      |
//! | `SHOW STATUS`                                   | [`status`]      |
//! | `KV …`                                          | [`kv`]          |
//! | `SCHEDULE`, `CANCEL SCHEDULE`, `SHOW SCHEDULES` | [`timer`]       |
//! | `SHOW QUEENWIRE POOLS/CLIENTS/SERVERS/STATS`    | [`console`]     |
//! | `PURGE TENANT`                                  | [`purge`]       |
//! | `CREATE/DROP/ALTER STREAM`, `SHOW STREAM(S)`    | [`stream`]      |
//!
//! The parser is pure: literals are checked here (names, JSON, durations,
//! counts), `$n` are left for the engine, which applies the same public
//! validators ([`validate_name`], [`validate_json`], [`parse_duration`], …)
//! to the bound values.
//!
//! `DROP GROUP` is PostgreSQL's old alias of `DROP ROLE`; here it always
//! means the dialect's `DROP GROUP grp ON queue` (roles are not a tenant's
//! business through the proxy; `DROP ROLE` still passes through).

pub mod ack;
pub mod browse;
pub mod console;
pub mod cron;
mod cursor;
mod duration;
mod error;
pub mod groups;
mod json;
pub mod kv;
mod lexer;
pub mod options;
pub mod pop;
pub mod purge;
pub mod push;
pub mod queue_admin;
pub mod replay;
pub mod show;
pub mod status;
pub mod stream;
pub mod timer;
mod value;

use crate::metrics::Kind;
use cursor::Cursor;
use lexer::{Lexer, Token, TokenKind};
use value::ParamTypes;

pub use duration::parse_duration;
pub use error::ParseError;
pub use json::{validate_json, MAX_JSON_DEPTH};
pub use options::{OptionKind, OptionValue, QueueOption, QueueSetting};
pub use value::{
    check_count, parse_bool, parse_count, parse_integer, validate_kv_bound, validate_kv_key,
    validate_name, validate_namespace, Json, Name, Timestamp, Value, MAX_BATCH, MAX_KV_KEY_BYTES,
    MAX_NAMESPACE_BYTES, MAX_NAME_BYTES,
};

/// Type OIDs of the dialect's columns and parameters: the one table in
/// `protocol::oid`.
pub use crate::protocol::oid::{self, Oid};

/// One result column, as RowDescription announces it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Column {
    pub name: &'static str,
    pub type_oid: Oid,
}

impl Column {
    pub const fn new(name: &'static str, type_oid: Oid) -> Column {
        Column { name, type_oid }
    }
}

/// The rows a statement locks, as seed 000's global lock order names
/// them: KV rows, then timer rows, then queue, partition and consumer rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Locks {
    /// None of the order's rows (reads, streams, the console, PURGE TENANT,
    /// which runs alone).
    None,
    /// `queen.kv` or `queen.log_timers` rows: KV writes, SCHEDULE, CANCEL
    /// SCHEDULE.
    KvOrTimer,
    /// Queue, partition or consumer rows.
    Queue,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Statement {
    Push(push::Push),
    Pop(pop::Pop),
    Ack(ack::Ack),
    Renew(ack::Renew),
    CreateQueue(queue_admin::CreateQueue),
    AlterQueue(queue_admin::AlterQueue),
    DropQueue(queue_admin::DropQueue),
    SeekGroup(queue_admin::SeekGroup),
    DropGroup(queue_admin::DropGroup),
    /// The subscription update of a consumer group.
    AlterGroup(groups::AlterGroup),
    ShowQueues,
    ShowPartitions {
        queue: Name,
    },
    ShowGroups {
        /// `None`: every queue of the tenant.
        queue: Option<Name>,
    },
    ShowDlq {
        queue: Name,
        /// [`show::DEFAULT_DLQ_LIMIT`] when not written.
        limit: Value<u32>,
    },
    Kv(kv::KvStatement),
    Schedule(timer::Schedule),
    CancelSchedule(timer::CancelSchedule),
    ShowSchedules {
        /// `None`: every queue of the tenant.
        queue: Option<Name>,
    },
    Browse(browse::Browse),
    GroupDetail(groups::GroupDetail),
    ReplayDlq(replay::ReplayDlq),
    ShowStatus,
    /// The admin view, answered by the proxy.
    Console(console::Console),
    /// Administrators only; never inside a transaction block.
    PurgeTenant(purge::PurgeTenant),
    CreateStream(Box<stream::CreateStream>),
    DropStream {
        name: Name,
        if_exists: bool,
    },
    AlterStream {
        name: Name,
        paused: bool,
    },
    ShowStreams,
    ShowStream {
        name: Name,
    },
}

impl Statement {
    /// The result columns (empty for the administration statements), known
    /// before execution so Describe can answer.
    pub fn columns(&self) -> &'static [Column] {
        match self {
            Statement::Push(_) => push::COLUMNS,
            Statement::Pop(_) => pop::COLUMNS,
            Statement::Ack(_) => ack::ACK_COLUMNS,
            Statement::Renew(_) => ack::RENEW_COLUMNS,
            Statement::CreateQueue(_)
            | Statement::AlterQueue(_)
            | Statement::DropQueue(_)
            | Statement::SeekGroup(_)
            | Statement::DropGroup(_)
            | Statement::AlterGroup(_) => &[],
            Statement::ShowQueues => show::QUEUES_COLUMNS,
            Statement::ShowPartitions { .. } => show::PARTITIONS_COLUMNS,
            Statement::ShowGroups { .. } => show::GROUPS_COLUMNS,
            Statement::ShowDlq { .. } => show::DLQ_COLUMNS,
            Statement::Kv(kv) => kv.columns(),
            Statement::Schedule(_) => timer::SCHEDULE_COLUMNS,
            Statement::CancelSchedule(_) => timer::CANCEL_COLUMNS,
            Statement::ShowSchedules { .. } => timer::SHOW_COLUMNS,
            Statement::Browse(browse) => browse.columns(),
            Statement::GroupDetail(detail) => detail.columns(),
            Statement::ReplayDlq(_) => replay::COLUMNS,
            Statement::ShowStatus => status::COLUMNS,
            Statement::Console(view) => view.columns(),
            Statement::PurgeTenant(_) => purge::COLUMNS,
            Statement::CreateStream(_)
            | Statement::DropStream { .. }
            | Statement::AlterStream { .. } => &[],
            Statement::ShowStreams => stream::LIST_COLUMNS,
            Statement::ShowStream { .. } => stream::SHOW_COLUMNS,
        }
    }

    /// How the metrics count the statement.
    pub fn kind(&self) -> Kind {
        match self {
            Statement::Push(_) => Kind::Push,
            Statement::Pop(_) => Kind::Pop,
            Statement::Ack(_) => Kind::Ack,
            Statement::Renew(_) => Kind::Renew,
            Statement::CreateQueue(_)
            | Statement::AlterQueue(_)
            | Statement::DropQueue(_)
            | Statement::SeekGroup(_)
            | Statement::DropGroup(_)
            | Statement::AlterGroup(_)
            | Statement::PurgeTenant(_)
            | Statement::CreateStream(_)
            | Statement::DropStream { .. }
            | Statement::AlterStream { .. } => Kind::QueueAdmin,
            Statement::ShowQueues
            | Statement::ShowPartitions { .. }
            | Statement::ShowGroups { .. }
            | Statement::ShowDlq { .. }
            | Statement::Browse(_)
            | Statement::GroupDetail(_)
            | Statement::ShowStatus
            | Statement::ShowStreams
            | Statement::ShowStream { .. } => Kind::Show,
            // A replay writes messages, but its rows do not name the queue
            // the way PUSH's do: counted as administration, not as pushes.
            Statement::ReplayDlq(_) => Kind::QueueAdmin,
            Statement::Kv(_) => Kind::Kv,
            Statement::Schedule(_)
            | Statement::CancelSchedule(_)
            | Statement::ShowSchedules { .. } => Kind::Timer,
            Statement::Console(_) => Kind::Console,
        }
    }

    /// The rows the statement locks, in the terms of seed 000's global
    /// lock order (`engine/lock_order.rs` keeps a transaction block to it).
    /// A CREATE or ALTER QUEUE that declares or changes an ephemeral queue
    /// (an option only ephemeral queues take).
    pub fn declares_ephemeral(&self) -> bool {
        let settings = match self {
            Statement::CreateQueue(c) => c.settings.as_slice(),
            Statement::AlterQueue(a) => a.settings.as_slice(),
            _ => return false,
        };
        settings.iter().any(|s| s.option.is_ephemeral())
    }

    pub fn locks(&self) -> Locks {
        match self {
            Statement::Kv(
                kv::KvStatement::Put(_) | kv::KvStatement::Incr(_) | kv::KvStatement::Delete(_),
            )
            | Statement::Schedule(_)
            | Statement::CancelSchedule(_) => Locks::KvOrTimer,
            Statement::Push(_)
            | Statement::Pop(_)
            | Statement::Ack(_)
            | Statement::Renew(_)
            | Statement::CreateQueue(_)
            | Statement::AlterQueue(_)
            | Statement::DropQueue(_)
            | Statement::SeekGroup(_)
            | Statement::DropGroup(_)
            | Statement::AlterGroup(_)
            | Statement::ReplayDlq(_) => Locks::Queue,
            Statement::Kv(kv::KvStatement::Get(_) | kv::KvStatement::List(_))
            | Statement::ShowSchedules { .. }
            | Statement::ShowQueues
            | Statement::ShowPartitions { .. }
            | Statement::ShowGroups { .. }
            | Statement::ShowDlq { .. }
            | Statement::Browse(_)
            | Statement::GroupDetail(_)
            | Statement::ShowStatus
            | Statement::Console(_)
            | Statement::PurgeTenant(_)
            | Statement::CreateStream(_)
            | Statement::DropStream { .. }
            | Statement::AlterStream { .. }
            | Statement::ShowStreams
            | Statement::ShowStream { .. } => Locks::None,
        }
    }

    /// The statement changes what the database holds (a POP too: it takes
    /// a lease), so PostgreSQL's read-only transactions refuse it.
    pub fn writes(&self) -> bool {
        !matches!(self.verb(), "SHOW" | "KV GET" | "KV LIST")
    }

    /// The statement's name as errors give it (`cannot execute PUSH …`).
    pub fn verb(&self) -> &'static str {
        match self {
            Statement::Push(_) => "PUSH",
            Statement::Pop(_) => "POP",
            Statement::Ack(_) => "ACK",
            Statement::Renew(_) => "RENEW",
            Statement::CreateQueue(_) => "CREATE QUEUE",
            Statement::AlterQueue(_) => "ALTER QUEUE",
            Statement::DropQueue(_) => "DROP QUEUE",
            Statement::SeekGroup(_) => "SEEK GROUP",
            Statement::DropGroup(_) => "DROP GROUP",
            Statement::AlterGroup(_) => "ALTER GROUP",
            Statement::Kv(kv::KvStatement::Get(_)) => "KV GET",
            Statement::Kv(kv::KvStatement::Put(_)) => "KV PUT",
            Statement::Kv(kv::KvStatement::Incr(_)) => "KV INCR",
            Statement::Kv(kv::KvStatement::Delete(_)) => "KV DELETE",
            Statement::Kv(kv::KvStatement::List(_)) => "KV LIST",
            Statement::Schedule(_) => "SCHEDULE",
            Statement::CancelSchedule(_) => "CANCEL SCHEDULE",
            Statement::ReplayDlq(_) => "REPLAY DLQ",
            Statement::PurgeTenant(_) => "PURGE TENANT",
            Statement::CreateStream(_) => "CREATE STREAM",
            Statement::DropStream { .. } => "DROP STREAM",
            Statement::AlterStream { .. } => "ALTER STREAM",
            Statement::ShowQueues
            | Statement::ShowPartitions { .. }
            | Statement::ShowGroups { .. }
            | Statement::ShowDlq { .. }
            | Statement::ShowSchedules { .. }
            | Statement::Browse(_)
            | Statement::GroupDetail(_)
            | Statement::ShowStatus
            | Statement::Console(_)
            | Statement::ShowStreams
            | Statement::ShowStream { .. } => "SHOW",
        }
    }

    /// CommandComplete's tag: `SELECT n` for statements returning rows.
    pub fn command_tag(&self, rows: usize) -> String {
        match self {
            Statement::CreateQueue(_) => "CREATE QUEUE".to_string(),
            Statement::AlterQueue(_) => "ALTER QUEUE".to_string(),
            Statement::DropQueue(_) => "DROP QUEUE".to_string(),
            Statement::SeekGroup(_) => "SEEK GROUP".to_string(),
            Statement::DropGroup(_) => "DROP GROUP".to_string(),
            Statement::AlterGroup(_) => "ALTER GROUP".to_string(),
            Statement::CreateStream(_) => "CREATE STREAM".to_string(),
            Statement::DropStream { .. } => "DROP STREAM".to_string(),
            Statement::AlterStream { .. } => "ALTER STREAM".to_string(),
            _ => format!("SELECT {rows}"),
        }
    }

    /// The highest `$n` the statement uses (0 without parameters).
    pub fn param_count(&self) -> usize {
        self.param_types().len()
    }

    /// The type Describe reports for `$n` when the client left it
    /// unspecified: `jsonb` for payloads and values, `text` for names,
    /// receipts, durations and text, `int4` for LIMIT/PARTITIONS, `int8` for
    /// versions, INCR amounts and integer options, `bool` for boolean
    /// options, `timestamptz` for timestamps. The first use of `$n` decides;
    /// a number the statement skips (or beyond it) is `text`.
    pub fn param_type(&self, n: usize) -> Oid {
        n.checked_sub(1)
            .and_then(|index| self.param_types().get(index).copied())
            .unwrap_or(oid::TEXT)
    }

    /// All of [`Statement::param_type`] at once: index i is `$(i+1)`.
    pub fn param_types(&self) -> Vec<Oid> {
        let mut params = ParamTypes::default();
        match self {
            Statement::Push(push) => push.describe_params(&mut params),
            Statement::Pop(pop) => pop.describe_params(&mut params),
            Statement::Ack(ack) => ack.describe_params(&mut params),
            Statement::Renew(renew) => renew.describe_params(&mut params),
            Statement::CreateQueue(create) => create.describe_params(&mut params),
            Statement::AlterQueue(alter) => alter.describe_params(&mut params),
            Statement::DropQueue(drop) => drop.describe_params(&mut params),
            Statement::SeekGroup(seek) => seek.describe_params(&mut params),
            Statement::DropGroup(drop) => drop.describe_params(&mut params),
            Statement::AlterGroup(alter) => alter.describe_params(&mut params),
            Statement::ShowQueues | Statement::ShowStatus | Statement::Console(_) => {}
            Statement::ShowPartitions { queue } => params.note(queue, oid::TEXT),
            Statement::ShowGroups { queue } | Statement::ShowSchedules { queue } => {
                params.note_all(queue, oid::TEXT)
            }
            Statement::ShowDlq { queue, limit } => {
                params.note(queue, oid::TEXT);
                params.note(limit, oid::INT4);
            }
            Statement::Kv(kv) => kv.describe_params(&mut params),
            Statement::Schedule(schedule) => schedule.describe_params(&mut params),
            Statement::CancelSchedule(cancel) => cancel.describe_params(&mut params),
            Statement::Browse(browse) => browse.describe_params(&mut params),
            Statement::GroupDetail(detail) => detail.describe_params(&mut params),
            Statement::ReplayDlq(replay) => replay.describe_params(&mut params),
            Statement::PurgeTenant(purge) => purge.describe_params(&mut params),
            Statement::CreateStream(create) => create.describe_params(&mut params),
            Statement::DropStream { name, .. }
            | Statement::AlterStream { name, .. }
            | Statement::ShowStream { name } => params.note(name, oid::TEXT),
            Statement::ShowStreams => {}
        }
        params.into_vec()
    }
}

/// The statement family, told from the first one or two words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    Push,
    Pop,
    Ack,
    Renew,
    Kv,
    Schedule,
    CancelSchedule,
    CreateQueue,
    AlterQueue,
    DropQueue,
    SeekGroup,
    DropGroup,
    AlterGroup,
    Show,
    ShowSchedules,
    Browse,
    GroupDetail,
    ReplayDlq,
    ShowStatus,
    Console,
    PurgeTenant,
    CreateStream,
    DropStream,
    AlterStream,
    ShowStream,
}

fn word<'a>(token: &Token<'a>) -> Option<&'a str> {
    match token.kind {
        TokenKind::Word(word) => Some(word),
        _ => None,
    }
}

/// Reads the first words (four for DROP GROUP). A lexical error there (an unterminated quote in
/// ordinary SQL) means "not ours": PostgreSQL reports it in its own words.
fn recognize(sql: &str) -> Option<Family> {
    let mut lexer = Lexer::new(sql);
    let first = lexer.next_token().ok()?;
    let first = word(&first)?.to_ascii_uppercase();
    let family = match first.as_str() {
        "PUSH" => Family::Push,
        "POP" => Family::Pop,
        "ACK" => Family::Ack,
        "RENEW" => Family::Renew,
        "KV" => Family::Kv,
        "SCHEDULE" => Family::Schedule,
        // PostgreSQL has no PURGE statement at all.
        "PURGE" => {
            let second = lexer.next_token().ok()?;
            if !word(&second)?.eq_ignore_ascii_case("TENANT") {
                return None;
            }
            Family::PurgeTenant
        }
        "CANCEL" | "CREATE" | "ALTER" | "DROP" | "SEEK" | "SHOW" | "REPLAY" => {
            let second = lexer.next_token().ok()?;
            let second = word(&second)?.to_ascii_uppercase();
            // `SHOW queues . x` (spaced or with a comment) is PostgreSQL's
            // SHOW of a qualified custom setting.
            if first == "SHOW" && qualified_next(&lexer) {
                return None;
            }
            match (first.as_str(), second.as_str()) {
                ("CANCEL", "SCHEDULE") => Family::CancelSchedule,
                // PostgreSQL 15 has no STREAM object: CREATE/DROP/ALTER
                // STREAM are syntax errors there.
                ("CREATE", "STREAM") => Family::CreateStream,
                ("CREATE", "OR") => {
                    let third = lexer.next_token().ok()?;
                    let fourth = lexer.next_token().ok()?;
                    if !(word(&third)?.eq_ignore_ascii_case("REPLACE")
                        && word(&fourth)?.eq_ignore_ascii_case("STREAM"))
                    {
                        return None;
                    }
                    Family::CreateStream
                }
                ("DROP", "STREAM") => Family::DropStream,
                ("ALTER", "STREAM") => Family::AlterStream,
                ("SHOW", "STREAMS") => Family::ShowStream,
                ("SHOW", "STREAM") if more_follows(&mut lexer) => Family::ShowStream,
                ("CREATE", "QUEUE") => Family::CreateQueue,
                ("ALTER", "QUEUE") => Family::AlterQueue,
                ("DROP", "QUEUE") => Family::DropQueue,
                // PostgreSQL's own DROP GROUP (an alias of DROP ROLE) takes
                // role names and never ON: the dialect's needs `ON queue`.
                ("DROP", "GROUP") => {
                    let _group = lexer.next_token().ok()?;
                    let on = lexer.next_token().ok()?;
                    if !word(&on).is_some_and(|w| w.eq_ignore_ascii_case("ON")) {
                        return None;
                    }
                    Family::DropGroup
                }
                // Likewise PostgreSQL's ALTER GROUP role ADD/DROP USER or
                // RENAME TO: the dialect's names a queue with ON.
                ("ALTER", "GROUP") => {
                    let _group = lexer.next_token().ok()?;
                    let on = lexer.next_token().ok()?;
                    if !word(&on).is_some_and(|w| w.eq_ignore_ascii_case("ON")) {
                        return None;
                    }
                    Family::AlterGroup
                }
                ("SEEK", "GROUP") => Family::SeekGroup,
                ("REPLAY", "DLQ") => Family::ReplayDlq,
                ("SHOW", "QUEUES" | "PARTITIONS" | "GROUPS" | "DLQ") => Family::Show,
                ("SHOW", "SCHEDULES") => Family::ShowSchedules,
                ("SHOW", "STATUS") => Family::ShowStatus,
                // PostgreSQL's SHOW takes one name: a second word is a
                // syntax error there.
                ("SHOW", "MESSAGES" | "MESSAGE" | "TRACE") if more_follows(&mut lexer) => {
                    Family::Browse
                }
                ("SHOW", "GROUP" | "LAGGING") if more_follows(&mut lexer) => Family::GroupDetail,
                // `SHOW queenwire` alone is a parameter lookup; a second
                // bare word is a syntax error in PostgreSQL.
                ("SHOW", "QUEENWIRE") => {
                    let view = lexer.next_token().ok()?;
                    word(&view)?;
                    Family::Console
                }
                _ => return None,
            }
        }
        _ => return None,
    };
    Some(family)
}

/// Whether the next token goes on a qualified name (`. x`).
fn qualified_next(lexer: &Lexer<'_>) -> bool {
    let mut ahead = lexer.clone();
    ahead.next_token().is_ok_and(|t| match t.kind {
        TokenKind::Word(w) => w.starts_with('.'),
        TokenKind::Symbol(c) => c == '.',
        _ => false,
    })
}

/// Whether another token follows (not `;`, not the end): `SHOW word` alone
/// is PostgreSQL's (a configuration parameter), `SHOW word more…` never is.
fn more_follows(lexer: &mut Lexer<'_>) -> bool {
    lexer
        .next_token()
        .is_ok_and(|t| !matches!(t.kind, TokenKind::Eof | TokenKind::Semicolon))
}

/// `None`: the text is not a dialect statement (pass it through to
/// PostgreSQL). `Some(Err)`: it is one, but malformed. One statement per
/// call: a trailing `;` and comments are allowed, anything after is `42601`.
pub fn parse(sql: &str) -> Option<Result<Statement, ParseError>> {
    let family = recognize(sql)?;
    let mut cursor = Cursor::new(sql);
    let statement = match family {
        Family::Push => push::Push::parse(&mut cursor).map(Statement::Push),
        Family::Pop => pop::Pop::parse(&mut cursor).map(Statement::Pop),
        Family::Ack => ack::Ack::parse(&mut cursor).map(Statement::Ack),
        Family::Renew => ack::Renew::parse(&mut cursor).map(Statement::Renew),
        Family::Kv => kv::KvStatement::parse(&mut cursor).map(Statement::Kv),
        Family::Schedule => timer::Schedule::parse(&mut cursor).map(Statement::Schedule),
        Family::CancelSchedule => {
            timer::CancelSchedule::parse(&mut cursor).map(Statement::CancelSchedule)
        }
        Family::CreateQueue => {
            queue_admin::CreateQueue::parse(&mut cursor).map(Statement::CreateQueue)
        }
        Family::AlterQueue => {
            queue_admin::AlterQueue::parse(&mut cursor).map(Statement::AlterQueue)
        }
        Family::DropQueue => queue_admin::DropQueue::parse(&mut cursor).map(Statement::DropQueue),
        Family::SeekGroup => queue_admin::SeekGroup::parse(&mut cursor).map(Statement::SeekGroup),
        Family::DropGroup => queue_admin::DropGroup::parse(&mut cursor).map(Statement::DropGroup),
        Family::AlterGroup => groups::AlterGroup::parse(&mut cursor).map(Statement::AlterGroup),
        Family::Show => show::parse(&mut cursor),
        Family::ShowSchedules => timer::parse_show(&mut cursor),
        Family::Browse => browse::Browse::parse(&mut cursor).map(Statement::Browse),
        Family::GroupDetail => groups::GroupDetail::parse(&mut cursor).map(Statement::GroupDetail),
        Family::ReplayDlq => replay::ReplayDlq::parse(&mut cursor).map(Statement::ReplayDlq),
        Family::ShowStatus => status::parse(&mut cursor),
        Family::Console => console::parse(&mut cursor),
        Family::PurgeTenant => purge::PurgeTenant::parse(&mut cursor),
        Family::CreateStream => stream::CreateStream::parse(&mut cursor),
        Family::DropStream => stream::parse_drop(&mut cursor),
        Family::AlterStream => stream::parse_alter(&mut cursor),
        Family::ShowStream => stream::parse_show(&mut cursor),
    };
    Some(statement.and_then(|statement| {
        cursor.finish()?;
        Ok(statement)
    }))
}

#[cfg(test)]
mod tests;

/// Helpers the grammar's test modules share.
#[cfg(test)]
pub(crate) mod test_support {
    use super::{parse, Statement, Value};

    pub fn lit(text: &str) -> Value<String> {
        Value::Literal(text.to_string())
    }

    /// The statement `sql` parses to; panics on anything else.
    pub fn ok(sql: &str) -> Statement {
        match parse(sql) {
            Some(Ok(statement)) => statement,
            other => panic!("{sql}: {other:?}"),
        }
    }

    /// The SQLSTATE and position of the error `sql` parses to.
    pub fn error(sql: &str) -> (&'static str, Option<usize>) {
        match parse(sql) {
            // Leaked: a few bytes per assertion, so tests compare literals.
            Some(Err(err)) => (
                Box::leak(err.sqlstate.code().to_string().into_boxed_str()),
                err.position,
            ),
            other => panic!("{sql}: {other:?}"),
        }
    }
}

#[cfg(test)]
mod driver_forms {
    use super::test_support::ok;
    use super::*;

    #[test]
    fn values_in_parentheses_and_with_casts_parse_as_postgresql_reads_them() {
        let Statement::Push(p) =
            ok(r#"PUSH INTO ('q') VALUES (('{"n": 1}')), ('{"cast": true}'::jsonb)"#)
        else {
            panic!()
        };
        assert_eq!(p.queue, Value::Literal("q".into()));
        assert_eq!(
            p.rows[1].payload,
            Value::Literal(r#"{"cast": true}"#.into())
        );
        let Statement::Pop(pop) =
            ok("POP FROM ('q') GROUP ('g') LIMIT ('5'::int4) WAIT ('1'::text)::interval")
        else {
            panic!()
        };
        assert_eq!(pop.limit, Value::Literal(5));
        ok("POP FROM q GROUP g SUBSCRIBE FROM '2000-01-01T00:00:00+00:00'::timestamptz");
        ok("POP FROM q SUBSCRIBE FROM '2000-01-01 00:00'::timestamp with time zone LIMIT 2");
        ok("ACK $1::text, ($2::character varying)");
        ok("KV PUT s k '[1]'::jsonb TTL ('5'::int8) EXPECT ('3'::bigint)");
        let err = match parse("POP FROM ('q') LIMIT ('0'::int4)") {
            Some(Err(e)) => e,
            other => panic!("{other:?}"),
        };
        assert_eq!(err.sqlstate.code(), "22023");
        assert!(
            matches!(parse("POP FROM ('q' LIMIT 1"), Some(Err(e)) if e.sqlstate.code() == "42601")
        );
    }
}
