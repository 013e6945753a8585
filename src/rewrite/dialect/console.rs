//! The admin view, read-only, answered by the proxy itself:
//! `SHOW QUEENWIRE POOLS`, `SHOW QUEENWIRE CLIENTS`,
//! `SHOW QUEENWIRE SERVERS`, `SHOW QUEENWIRE STATS`.
//!
//! PostgreSQL's `SHOW` takes one (possibly dotted) parameter name, so
//! `SHOW queenwire pools` — two bare words — is a syntax error there and
//! never a statement PostgreSQL accepts; `SHOW queenwire` alone (a
//! parameter lookup) and `SHOW queenwire.pools` still pass through.

use super::cursor::{Cursor, Result};
use super::{oid, Column, Statement};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Console {
    Pools,
    Clients,
    Servers,
    Stats,
}

pub const POOLS_COLUMNS: &[Column] = &[
    Column::new("role", oid::TEXT),
    Column::new("active", oid::INT8),
    Column::new("idle", oid::INT8),
    Column::new("waiting", oid::INT8),
    Column::new("max", oid::INT8),
];

pub const CLIENTS_COLUMNS: &[Column] = &[
    Column::new("session", oid::INT8),
    Column::new("user", oid::TEXT),
    Column::new("tenant", oid::UUID),
    Column::new("state", oid::TEXT),
    Column::new("pinned", oid::BOOL),
    Column::new("since", oid::TIMESTAMPTZ),
    Column::new("application_name", oid::TEXT),
    Column::new("client_addr", oid::TEXT),
    Column::new("backend_pid", oid::INT4),
];

pub const SERVERS_COLUMNS: &[Column] = &[
    Column::new("backend_pid", oid::INT4),
    Column::new("state", oid::TEXT),
    Column::new("held_by", oid::INT8),
    Column::new("user", oid::TEXT),
    Column::new("tenant", oid::UUID),
];

pub const STATS_COLUMNS: &[Column] = &[
    Column::new("kind", oid::TEXT),
    Column::new("statements", oid::INT8),
    Column::new("errors", oid::INT8),
    Column::new("total_time_us", oid::INT8),
    Column::new("mean_time_us", oid::INT8),
];

impl Console {
    pub fn columns(self) -> &'static [Column] {
        match self {
            Console::Pools => POOLS_COLUMNS,
            Console::Clients => CLIENTS_COLUMNS,
            Console::Servers => SERVERS_COLUMNS,
            Console::Stats => STATS_COLUMNS,
        }
    }
}

/// `SHOW QUEENWIRE POOLS|CLIENTS|SERVERS|STATS`.
pub(crate) fn parse(cursor: &mut Cursor<'_>) -> Result<Statement> {
    cursor.expect_keyword("SHOW")?;
    cursor.expect_keyword("QUEENWIRE")?;
    let view = if cursor.eat_keyword("POOLS") {
        Console::Pools
    } else if cursor.eat_keyword("CLIENTS") {
        Console::Clients
    } else if cursor.eat_keyword("SERVERS") {
        Console::Servers
    } else if cursor.eat_keyword("STATS") {
        Console::Stats
    } else {
        return Err(cursor.unexpected("POOLS, CLIENTS, SERVERS or STATS"));
    };
    Ok(Statement::Console(view))
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::super::test_support::{error, ok};
    use super::*;

    #[test]
    fn the_four_views_parse_in_any_case() {
        assert_eq!(
            ok("SHOW QUEENWIRE POOLS"),
            Statement::Console(Console::Pools)
        );
        assert_eq!(
            ok("show queenwire clients;"),
            Statement::Console(Console::Clients)
        );
        assert_eq!(
            ok("Show QueenWire Servers -- c"),
            Statement::Console(Console::Servers)
        );
        assert_eq!(
            ok("SHOW QUEENWIRE STATS"),
            Statement::Console(Console::Stats)
        );
    }

    #[test]
    fn what_postgresql_accepts_passes_through() {
        // A parameter lookup, a dotted (custom) parameter, and SHOW ALL.
        assert_eq!(parse("SHOW queenwire"), None);
        assert_eq!(parse("SHOW queenwire.pools"), None);
        assert_eq!(parse("SHOW ALL"), None);
    }

    #[test]
    fn an_unknown_view_or_trailing_words_are_syntax_errors() {
        assert_eq!(error("SHOW QUEENWIRE TABLES").0, "42601");
        assert_eq!(error("SHOW QUEENWIRE POOLS extra").0, "42601");
    }
}
