//! `SHOW STATUS`: the tenant's overview (015_status), one row.
//!
//! `SHOW status` is valid PostgreSQL syntax, as `SHOW QUEUES` is: it asks
//! for a configuration parameter. PostgreSQL has none of that name and a
//! parameter without a dot cannot be defined (`SET status = 1` is `42704`),
//! so that statement can only fail there; the dialect takes it, exactly
//! that and nothing after it.

use super::cursor::{Cursor, Result};
use super::{oid, Column, Statement};

pub const COLUMNS: &[Column] = &[
    Column::new("queues", oid::INT8),
    Column::new("partitions", oid::INT8),
    Column::new("consumer_groups", oid::INT8),
    Column::new("messages", oid::INT8),
    Column::new("pending", oid::INT8),
    Column::new("processing", oid::INT8),
    Column::new("dead_lettered", oid::INT8),
    Column::new("active_leases", oid::INT8),
    Column::new("pushed_last_minute", oid::INT8),
    Column::new("throughput", oid::JSONB),
];

/// Whole minutes of `throughput` (plus the current one).
pub const THROUGHPUT_MINUTES: i32 = 15;

pub(crate) fn parse(cursor: &mut Cursor<'_>) -> Result<Statement> {
    cursor.expect_keyword("SHOW")?;
    cursor.expect_keyword("STATUS")?;
    Ok(Statement::ShowStatus)
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{error, ok};
    use super::*;

    #[test]
    fn show_status_is_exactly_two_words() {
        let statement = ok("show status;");
        assert_eq!(statement, Statement::ShowStatus);
        assert_eq!(statement.columns(), COLUMNS);
        assert!(statement.param_types().is_empty());
        assert_eq!(error("SHOW STATUS ON q"), ("42601", Some(13)));
    }
}
