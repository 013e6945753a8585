//! `PURGE TENANT 'uuid'`: removes everything of one tenant (queues,
//! partitions, messages, DLQ, KV, timers, role mappings), administrators
//! only. PostgreSQL has no `PURGE` statement, so the text is never one it
//! accepts. The engine loops over `queen.tenant_purge_step_v1`, one
//! transaction per step (`engine/purge.rs`).

use super::cursor::{Cursor, Result};
use super::error::{quoted, ParseError, SqlState};
use super::value::ParamTypes;
use super::{oid, Column, Statement, Value};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PurgeTenant {
    /// The tenant's UUID as text (a literal already checked here).
    pub tenant: Value<String>,
}

/// One row: the tenant and what was removed.
pub const COLUMNS: &[Column] = &[
    Column::new("tenant", oid::UUID),
    Column::new("queues", oid::INT8),
    Column::new("partitions", oid::INT8),
    Column::new("segments", oid::INT8),
    Column::new("messages", oid::INT8),
    Column::new("dlq", oid::INT8),
    Column::new("kv_keys", oid::INT8),
    Column::new("timers", oid::INT8),
];

/// A tenant UUID as PostgreSQL's `uuid` input reads it, else 22P02.
pub fn parse_tenant(text: &str) -> std::result::Result<uuid::Uuid, ParseError> {
    uuid::Uuid::parse_str(text.trim()).map_err(|_| {
        ParseError::new(
            SqlState::INVALID_TEXT_REPRESENTATION,
            format!("invalid input syntax for type uuid: {}", quoted(text)),
        )
    })
}

impl PurgeTenant {
    pub(crate) fn parse(cursor: &mut Cursor<'_>) -> Result<Statement> {
        cursor.expect_keyword("PURGE")?;
        cursor.expect_keyword("TENANT")?;
        let at = cursor.position(&cursor.peek().clone());
        let tenant = cursor.text_value("a tenant UUID")?;
        if let Value::Literal(text) = &tenant {
            parse_tenant(text).map_err(|e| e.at(at))?;
        }
        Ok(Statement::PurgeTenant(PurgeTenant { tenant }))
    }

    pub(crate) fn describe_params(&self, params: &mut ParamTypes) {
        params.note(&self.tenant, oid::TEXT);
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::super::test_support::{error, lit, ok};
    use super::*;

    #[test]
    fn purge_tenant_takes_a_uuid_literal_or_a_parameter() {
        assert_eq!(
            ok("purge tenant '00000000-0000-0000-0000-000000000002';"),
            Statement::PurgeTenant(PurgeTenant {
                tenant: lit("00000000-0000-0000-0000-000000000002")
            })
        );
        assert_eq!(
            ok("PURGE TENANT $1"),
            Statement::PurgeTenant(PurgeTenant {
                tenant: Value::Param(1)
            })
        );
    }

    #[test]
    fn a_bad_uuid_or_trailing_words_are_errors() {
        assert_eq!(error("PURGE TENANT 'nope'"), ("22P02", Some(14)));
        assert_eq!(error("PURGE TENANT").0, "42601");
        assert_eq!(
            error("PURGE TENANT '00000000-0000-0000-0000-000000000002' x").0,
            "42601"
        );
    }

    #[test]
    fn other_purge_words_pass_through() {
        assert_eq!(parse("PURGE something"), None);
    }
}
