//! Transaction control for the engine's own transactions (the timer fire's
//! explicit block and its savepoint), and `queen.raise_v1`, which makes the
//! backend's current transaction fail exactly as for an error of its own.

use super::{column, Call, CallSpec};
use tokio_postgres::types::{ToSql, Type};

pub const RAISE: CallSpec = CallSpec {
    name: "qw_raise_v1",
    sql: "SELECT queen.raise_v1(p_code => $1, p_message => $2) AS raised",
    params: &[Type::TEXT, Type::TEXT],
    columns: &[column("raised", Type::VOID)],
};

/// Raises an error with this SQLSTATE and message in the backend.
pub struct Raise<'a> {
    pub code: &'a str,
    pub message: &'a str,
}

impl Call for Raise<'_> {
    const SPEC: &'static CallSpec = &RAISE;
    type Row = ();
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![&self.code, &self.message]
    }
}

/// A statement without parameters or rows, run with `BackendConn::call`.
macro_rules! control {
    ($const:ident, $name:literal, $sql:literal) => {
        pub const $const: CallSpec = CallSpec {
            name: $name,
            sql: $sql,
            params: &[],
            columns: &[],
        };
    };
}

control!(BEGIN, "qw_begin", "BEGIN");
control!(COMMIT, "qw_commit", "COMMIT");
control!(SAVEPOINT_FIRE, "qw_savepoint_fire", "SAVEPOINT qw_fire");
control!(RELEASE_FIRE, "qw_release_fire", "RELEASE SAVEPOINT qw_fire");
control!(
    ROLLBACK_TO_FIRE,
    "qw_rollback_to_fire",
    "ROLLBACK TO SAVEPOINT qw_fire"
);

/// Ends a transaction the engine abandons, over the simple protocol.
pub const ROLLBACK: &str = "ROLLBACK";
