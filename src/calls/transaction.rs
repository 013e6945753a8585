//! Transaction control for the engine's own transactions (the timer fire's
//! explicit block and its savepoint), and `queen.raise_v1`, which makes the
//! backend's current transaction fail exactly as for an error of its own.

use super::declare::calls;

calls! {
    pub const RAISE = "qw_raise_v1" {
        SELECT queen.raise_v1;
        /// Raises an error with this SQLSTATE and message in the backend.
        pub struct Raise<'a> {
            code: &'a str = TEXT,
            message: &'a str = TEXT,
        }
        row () { raised: VOID }
    }

    // Statements without parameters or rows, run with `BackendConn::call`.
    pub const BEGIN = "qw_begin" { "BEGIN"; args(); row () {} }
    pub const COMMIT = "qw_commit" { "COMMIT"; args(); row () {} }
    pub const SAVEPOINT_FIRE = "qw_savepoint_fire" { "SAVEPOINT qw_fire"; args(); row () {} }
    pub const RELEASE_FIRE = "qw_release_fire" { "RELEASE SAVEPOINT qw_fire"; args(); row () {} }
    pub const ROLLBACK_TO_FIRE = "qw_rollback_to_fire" {
        "ROLLBACK TO SAVEPOINT qw_fire";
        args();
        row () {}
    }
}

/// Ends a transaction the engine abandons, over the simple protocol.
pub const ROLLBACK: &str = "ROLLBACK";
