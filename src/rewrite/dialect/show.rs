//! Inspection: `SHOW QUEUES`, `SHOW PARTITIONS FROM queue`,
//! `SHOW GROUPS [ON queue]`, `SHOW DLQ FROM queue [LIMIT n]`.
//! (`SHOW SCHEDULES` belongs to the timer family, `timer.rs`.)

use super::cursor::{Cursor, Result};
use super::value::{Name, Value};
use super::{oid, Column, Statement};

pub const QUEUES_COLUMNS: &[Column] = &[
    Column::new("queue", oid::TEXT),
    Column::new("partitions", oid::INT8),
    Column::new("messages", oid::INT8),
    Column::new("pending", oid::INT8),
    Column::new("dead_lettered", oid::INT8),
    Column::new("created_at", oid::TIMESTAMPTZ),
    // `durable`, or where an ephemeral queue's messages are (memory only).
    Column::new("storage", oid::TEXT),
];

pub const PARTITIONS_COLUMNS: &[Column] = &[
    Column::new("partition", oid::TEXT),
    Column::new("messages", oid::INT8),
    Column::new("last_offset", oid::INT8),
    Column::new("last_write_at", oid::TIMESTAMPTZ),
];

pub const GROUPS_COLUMNS: &[Column] = &[
    Column::new("queue", oid::TEXT),
    Column::new("group", oid::TEXT),
    Column::new("partitions", oid::INT8),
    Column::new("lag", oid::INT8),
    Column::new("oldest_pending_at", oid::TIMESTAMPTZ),
    Column::new("leased_partitions", oid::INT8),
    // Appended (014_consumer_groups): the columns above keep their places.
    Column::new("time_lag_seconds", oid::INT8),
    Column::new("last_claimed_at", oid::TIMESTAMPTZ),
    Column::new("state", oid::TEXT),
    // `ordered` or `shared`.
    Column::new("type", oid::TEXT),
];

pub const DLQ_COLUMNS: &[Column] = &[
    Column::new("message_id", oid::UUID),
    Column::new("partition", oid::TEXT),
    Column::new("offset", oid::INT8),
    Column::new("group", oid::TEXT),
    Column::new("reason", oid::TEXT),
    Column::new("retry_count", oid::INT4),
    Column::new("failed_at", oid::TIMESTAMPTZ),
    Column::new("payload", oid::JSONB),
];

/// `SHOW DLQ` without `LIMIT` returns at most this many rows (the dialect
/// leaves it open; the same default as `KV LIST`).
pub const DEFAULT_DLQ_LIMIT: u32 = 100;

/// Parses the four inspection statements into their `Statement` variants.
pub(crate) fn parse(cursor: &mut Cursor<'_>) -> Result<Statement> {
    cursor.expect_keyword("SHOW")?;
    if cursor.eat_keyword("QUEUES") {
        return Ok(Statement::ShowQueues);
    }
    if cursor.eat_keyword("PARTITIONS") {
        cursor.expect_keyword("FROM")?;
        let queue = cursor.name("queue")?;
        return Ok(Statement::ShowPartitions { queue });
    }
    if cursor.eat_keyword("GROUPS") {
        let queue = optional_on_queue(cursor)?;
        return Ok(Statement::ShowGroups { queue });
    }
    cursor.expect_keyword("DLQ")?;
    cursor.expect_keyword("FROM")?;
    let queue = cursor.name("queue")?;
    let limit = if cursor.eat_keyword("LIMIT") {
        cursor.count("LIMIT")?
    } else {
        Value::Literal(DEFAULT_DLQ_LIMIT)
    };
    Ok(Statement::ShowDlq { queue, limit })
}

/// `[ON queue]`, shared with `SHOW SCHEDULES`.
pub(crate) fn optional_on_queue(cursor: &mut Cursor<'_>) -> Result<Option<Name>> {
    if cursor.eat_keyword("ON") {
        Ok(Some(cursor.name("queue")?))
    } else {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{error, lit, ok};
    use super::*;

    #[test]
    fn show_queues() {
        let statement = ok("SHOW QUEUES;");
        assert_eq!(statement, Statement::ShowQueues);
        assert_eq!(statement.columns(), QUEUES_COLUMNS);
        assert_eq!(statement.command_tag(3), "SELECT 3");
        assert_eq!(error("SHOW QUEUES ON q"), ("42601", Some(13)));
    }

    #[test]
    fn show_partitions() {
        assert_eq!(
            ok("show partitions from orders"),
            Statement::ShowPartitions {
                queue: lit("orders")
            }
        );
        assert_eq!(error("SHOW PARTITIONS orders"), ("42601", Some(17)));
    }

    #[test]
    fn show_groups() {
        assert_eq!(ok("SHOW GROUPS"), Statement::ShowGroups { queue: None });
        let statement = ok("SHOW GROUPS ON $1");
        assert_eq!(
            statement,
            Statement::ShowGroups {
                queue: Some(Value::Param(1))
            }
        );
        assert_eq!(statement.param_types(), vec![oid::TEXT]);
        assert_eq!(statement.columns()[1].name, "group");
    }

    #[test]
    fn show_dlq() {
        assert_eq!(
            ok("SHOW DLQ FROM q"),
            Statement::ShowDlq {
                queue: lit("q"),
                limit: Value::Literal(DEFAULT_DLQ_LIMIT)
            }
        );
        let statement = ok("SHOW DLQ FROM q LIMIT $1");
        assert_eq!(statement.param_types(), vec![oid::INT4]);
        assert_eq!(error("SHOW DLQ FROM q LIMIT 20000"), ("54000", Some(23)));
        assert_eq!(statement.columns().len(), 8);
    }
}
