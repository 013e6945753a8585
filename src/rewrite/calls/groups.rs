//! The consumer-groups surface (`sql/procedures/014_consumer_groups.sql`):
//! one group's detail per partition (`consumer_group_detail_v1`), the
//! lagging partitions (`lagging_partitions_v1`) and the subscription update
//! (`consumer_group_subscribe_v1`). The group list with its
//! state is SHOW GROUPS (`show::GROUPS`). Columns come back in the order of
//! the statements' own (`dialect/groups.rs`).

use super::{column, Call, CallSpec, DecodeError, FromRow, Row};
use crate::protocol::SqlError;
use crate::rewrite::bind::Params;
use crate::rewrite::dialect::pop::SubscribeFrom;
use crate::rewrite::dialect::Value;
use std::time::SystemTime;
use tokio_postgres::types::{ToSql, Type};
use uuid::Uuid;

pub const DETAIL: CallSpec = CallSpec {
    name: "qw_consumer_group_detail_v1",
    sql: "SELECT partition_name, cursor_offset, last_offset, lag, oldest_pending_at, lease_expires_at, lease_from, lease_to, retry_count, blocked_until, last_claimed_at FROM queen.consumer_group_detail_v1(p_queue => $1, p_group => $2, p_tenant => $3)",
    params: &[Type::TEXT, Type::TEXT, Type::UUID],
    columns: &[
        column("partition_name", Type::TEXT),
        column("cursor_offset", Type::INT8),
        column("last_offset", Type::INT8),
        column("lag", Type::INT8),
        column("oldest_pending_at", Type::TIMESTAMPTZ),
        column("lease_expires_at", Type::TIMESTAMPTZ),
        column("lease_from", Type::INT8),
        column("lease_to", Type::INT8),
        column("retry_count", Type::INT4),
        column("blocked_until", Type::TIMESTAMPTZ),
        column("last_claimed_at", Type::TIMESTAMPTZ),
    ],
};

pub struct Detail<'a> {
    pub queue: &'a str,
    pub group: &'a str,
    pub tenant: Uuid,
}

impl Call for Detail<'_> {
    const SPEC: &'static CallSpec = &DETAIL;
    type Row = DetailRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![&self.queue, &self.group, &self.tenant]
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct DetailRow {
    pub partition_name: Option<String>,
    pub cursor_offset: Option<i64>,
    pub last_offset: Option<i64>,
    pub lag: Option<i64>,
    pub oldest_pending_at: Option<SystemTime>,
    pub lease_expires_at: Option<SystemTime>,
    pub lease_from: Option<i64>,
    pub lease_to: Option<i64>,
    pub retry_count: Option<i32>,
    pub blocked_until: Option<SystemTime>,
    pub last_claimed_at: Option<SystemTime>,
}

impl FromRow for DetailRow {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        Ok(DetailRow {
            partition_name: row.get("partition_name")?,
            cursor_offset: row.get("cursor_offset")?,
            last_offset: row.get("last_offset")?,
            lag: row.get("lag")?,
            oldest_pending_at: row.get("oldest_pending_at")?,
            lease_expires_at: row.get("lease_expires_at")?,
            lease_from: row.get("lease_from")?,
            lease_to: row.get("lease_to")?,
            retry_count: row.get("retry_count")?,
            blocked_until: row.get("blocked_until")?,
            last_claimed_at: row.get("last_claimed_at")?,
        })
    }
}

pub const SUBSCRIBE: CallSpec = CallSpec {
    name: "qw_consumer_group_subscribe_v1",
    sql: "SELECT queen.consumer_group_subscribe_v1(p_queue => $1, p_group => $2, p_mode => $3, p_at => $4::timestamptz, p_tenant => $5) AS cursors_kept",
    params: &[Type::TEXT, Type::TEXT, Type::TEXT, Type::TEXT, Type::UUID],
    columns: &[column("cursors_kept", Type::INT8)],
};

/// ALTER GROUP … SUBSCRIBE FROM, with its names and time bound.
pub struct Subscribe {
    pub queue: String,
    pub group: String,
    pub mode: &'static str,
    /// Timestamp text, cast by PostgreSQL.
    pub at: Option<String>,
    pub tenant: Uuid,
}

impl Subscribe {
    pub fn new(
        queue: &Value<String>,
        group: &Value<String>,
        from: &SubscribeFrom,
        params: &Params<'_>,
        tenant: Uuid,
    ) -> Result<Subscribe, SqlError> {
        let (mode, at) = match from {
            SubscribeFrom::Beginning => ("beginning", None),
            SubscribeFrom::Now => ("now", None),
            SubscribeFrom::Timestamp(ts) => ("timestamp", Some(params.text(ts, "SUBSCRIBE FROM")?)),
        };
        Ok(Subscribe {
            queue: params.name(queue, "queue")?,
            group: params.name(group, "group")?,
            mode,
            at,
            tenant,
        })
    }
}

impl Call for Subscribe {
    const SPEC: &'static CallSpec = &SUBSCRIBE;
    type Row = ();
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![&self.queue, &self.group, &self.mode, &self.at, &self.tenant]
    }
}

pub const LAGGING: CallSpec = CallSpec {
    name: "qw_lagging_partitions_v1",
    sql: "SELECT consumer_group, partition_name, lag, oldest_pending_at, time_lag_seconds FROM queen.lagging_partitions_v1(p_queue => $1, p_group => $2, p_over_seconds => $3, p_tenant => $4)",
    params: &[Type::TEXT, Type::TEXT, Type::INT8, Type::UUID],
    columns: &[
        column("consumer_group", Type::TEXT),
        column("partition_name", Type::TEXT),
        column("lag", Type::INT8),
        column("oldest_pending_at", Type::TIMESTAMPTZ),
        column("time_lag_seconds", Type::INT8),
    ],
};

pub struct Lagging<'a> {
    pub queue: &'a str,
    /// `None`: every group of the queue.
    pub group: Option<&'a str>,
    pub over_seconds: i64,
    pub tenant: Uuid,
}

impl Call for Lagging<'_> {
    const SPEC: &'static CallSpec = &LAGGING;
    type Row = LaggingRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![&self.queue, &self.group, &self.over_seconds, &self.tenant]
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct LaggingRow {
    pub consumer_group: Option<String>,
    pub partition_name: Option<String>,
    pub lag: Option<i64>,
    pub oldest_pending_at: Option<SystemTime>,
    pub time_lag_seconds: Option<i64>,
}

impl FromRow for LaggingRow {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        Ok(LaggingRow {
            consumer_group: row.get("consumer_group")?,
            partition_name: row.get("partition_name")?,
            lag: row.get("lag")?,
            oldest_pending_at: row.get("oldest_pending_at")?,
            time_lag_seconds: row.get("time_lag_seconds")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rewrite::dialect::groups;

    #[test]
    fn reader_columns_match_the_statements_columns_by_type() {
        for (spec, statement) in [
            (&DETAIL, groups::GROUP_COLUMNS),
            (&LAGGING, groups::LAGGING_COLUMNS),
        ] {
            let types: Vec<u32> = spec.columns.iter().map(|c| c.ty.oid()).collect();
            let expected: Vec<u32> = statement.iter().map(|c| c.type_oid).collect();
            assert_eq!(types, expected, "{}", spec.name);
        }
    }
}
