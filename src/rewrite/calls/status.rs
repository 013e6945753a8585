//! SHOW STATUS: `status_v1` (015_status). Columns in the statement's order.

use super::{column, Call, CallSpec, DecodeError, FromRow, Jsonb, Row};
use tokio_postgres::types::{ToSql, Type};
use uuid::Uuid;

pub const STATUS: CallSpec = CallSpec {
    name: "qw_status_v1",
    sql: "SELECT queues, partitions, consumer_groups, messages, pending, processing, dead_lettered, active_leases, pushed_last_minute, throughput FROM queen.status_v1(p_minutes => $1, p_tenant => $2)",
    params: &[Type::INT4, Type::UUID],
    columns: &[
        column("queues", Type::INT8),
        column("partitions", Type::INT8),
        column("consumer_groups", Type::INT8),
        column("messages", Type::INT8),
        column("pending", Type::INT8),
        column("processing", Type::INT8),
        column("dead_lettered", Type::INT8),
        column("active_leases", Type::INT8),
        column("pushed_last_minute", Type::INT8),
        column("throughput", Type::JSONB),
    ],
};

pub struct Status {
    pub minutes: i32,
    pub tenant: Uuid,
}

impl Call for Status {
    const SPEC: &'static CallSpec = &STATUS;
    type Row = StatusRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![&self.minutes, &self.tenant]
    }
}

/// The counts, in the statement's column order, then the throughput JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusRow {
    pub counts: Vec<Option<i64>>,
    pub throughput: Option<String>,
}

impl FromRow for StatusRow {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        let mut counts = Vec::with_capacity(STATUS.columns.len() - 1);
        for c in &STATUS.columns[..STATUS.columns.len() - 1] {
            counts.push(row.get(c.name)?);
        }
        let throughput: Option<Jsonb> = row.get("throughput")?;
        Ok(StatusRow {
            counts,
            throughput: throughput.map(|j| j.0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rewrite::dialect::status;

    #[test]
    fn reader_columns_match_the_statements_columns() {
        let ours: Vec<(&str, u32)> = STATUS
            .columns
            .iter()
            .map(|c| (c.name, c.ty.oid()))
            .collect();
        let statement: Vec<(&str, u32)> = status::COLUMNS
            .iter()
            .map(|c| (c.name, c.type_oid))
            .collect();
        assert_eq!(ours, statement);
    }
}
