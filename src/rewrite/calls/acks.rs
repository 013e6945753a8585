//! ACK and RENEW: `log_ack_v1` (receipt by receipt, and every FAILED),
//! `log_ack_v2` (a plain ACK's receipts as runs of offsets) and
//! `log_renew_v1`; for a shared group's receipts (each message leased on
//! its own), `log_ack_shared_v1` and `log_renew_shared_v1`. The engine checks the receipts' HMAC and builds the runs
//! (`engine/acks.rs`).

use super::{column, Call, CallSpec, DecodeError, FromRow, Row};
use std::time::SystemTime;
use tokio_postgres::types::{ToSql, Type};
use uuid::Uuid;

pub const ACK: CallSpec = CallSpec {
    name: "qw_ack_v1",
    sql: "SELECT idx, status FROM queen.log_ack_v1(p_partition_ids => $1, p_offsets => $2, p_groups => $3, p_lease_tokens => $4, p_failed => $5, p_reason => $6, p_tenant => $7)",
    params: &[
        Type::INT8_ARRAY,
        Type::INT8_ARRAY,
        Type::TEXT_ARRAY,
        Type::UUID_ARRAY,
        Type::BOOL,
        Type::TEXT,
        Type::UUID,
    ],
    columns: &[column("idx", Type::INT4), column("status", Type::TEXT)],
};

/// Acknowledges messages, parallel arrays by receipt.
pub struct Ack<'a> {
    pub partition_ids: Vec<i64>,
    pub offsets: Vec<i64>,
    pub groups: Vec<&'a str>,
    pub lease_tokens: Vec<Uuid>,
    pub failed: bool,
    pub reason: Option<String>,
    pub tenant: Uuid,
}

impl Call for Ack<'_> {
    const SPEC: &'static CallSpec = &ACK;
    type Row = AckRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![
            &self.partition_ids,
            &self.offsets,
            &self.groups,
            &self.lease_tokens,
            &self.failed,
            &self.reason,
            &self.tenant,
        ]
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct AckRow {
    /// Index of the receipt in the call's arrays.
    pub idx: i32,
    pub status: String,
}

impl FromRow for AckRow {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        Ok(AckRow {
            idx: row.get("idx")?,
            status: row.get("status")?,
        })
    }
}

pub const ACK_RUNS: CallSpec = CallSpec {
    name: "qw_ack_v2",
    sql: "SELECT idx, message_offset, status FROM queen.log_ack_v2(p_partition_ids => $1, p_groups => $2, p_lease_tokens => $3, p_from => $4, p_to => $5, p_tenant => $6)",
    params: &[
        Type::INT8_ARRAY,
        Type::TEXT_ARRAY,
        Type::UUID_ARRAY,
        Type::INT8_ARRAY,
        Type::INT8_ARRAY,
        Type::UUID,
    ],
    columns: &[
        column("idx", Type::INT4),
        column("message_offset", Type::INT8),
        column("status", Type::TEXT),
    ],
};

/// Acknowledges runs of receipts (a plain ACK): run i is every offset
/// `from[i] ..= to[i]` of (partition, group, lease token), parallel arrays.
pub struct AckRuns<'a> {
    pub partition_ids: Vec<i64>,
    pub groups: Vec<&'a str>,
    pub lease_tokens: Vec<Uuid>,
    pub from: Vec<i64>,
    pub to: Vec<i64>,
    pub tenant: Uuid,
}

impl Call for AckRuns<'_> {
    const SPEC: &'static CallSpec = &ACK_RUNS;
    type Row = AckRunRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![
            &self.partition_ids,
            &self.groups,
            &self.lease_tokens,
            &self.from,
            &self.to,
            &self.tenant,
        ]
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct AckRunRow {
    /// Index of the run in the call's arrays.
    pub idx: i32,
    /// `None`: the status of every offset of the run.
    pub message_offset: Option<i64>,
    pub status: String,
}

impl FromRow for AckRunRow {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        Ok(AckRunRow {
            idx: row.get("idx")?,
            message_offset: row.get("message_offset")?,
            status: row.get("status")?,
        })
    }
}

pub const RENEW: CallSpec = CallSpec {
    name: "qw_renew_v1",
    sql: "SELECT idx, lease_expires_at FROM queen.log_renew_v1(p_partition_ids => $1, p_groups => $2, p_lease_tokens => $3, p_extend_ms => $4, p_tenant => $5)",
    params: &[
        Type::INT8_ARRAY,
        Type::TEXT_ARRAY,
        Type::UUID_ARRAY,
        Type::INT8,
        Type::UUID,
    ],
    columns: &[
        column("idx", Type::INT4),
        column("lease_expires_at", Type::TIMESTAMPTZ),
    ],
};

pub struct Renew<'a> {
    pub partition_ids: Vec<i64>,
    pub groups: Vec<&'a str>,
    pub lease_tokens: Vec<Uuid>,
    /// `None`: each queue's own lease time.
    pub extend_ms: Option<i64>,
    pub tenant: Uuid,
}

impl Call for Renew<'_> {
    const SPEC: &'static CallSpec = &RENEW;
    type Row = RenewRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![
            &self.partition_ids,
            &self.groups,
            &self.lease_tokens,
            &self.extend_ms,
            &self.tenant,
        ]
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct RenewRow {
    pub idx: i32,
    pub lease_expires_at: Option<SystemTime>,
}

impl FromRow for RenewRow {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        Ok(RenewRow {
            idx: row.get("idx")?,
            lease_expires_at: row.get("lease_expires_at")?,
        })
    }
}

pub const ACK_SHARED: CallSpec = CallSpec {
    name: "qw_ack_shared_v1",
    sql: "SELECT idx, status FROM queen.log_ack_shared_v1(p_partition_ids => $1, p_offsets => $2, p_groups => $3, p_lease_tokens => $4, p_failed => $5, p_reason => $6, p_tenant => $7)",
    params: ACK.params,
    columns: ACK.columns,
};

/// [`Ack`] of a shared group's receipts: each message alone.
pub struct AckShared<'a>(pub Ack<'a>);

impl Call for AckShared<'_> {
    const SPEC: &'static CallSpec = &ACK_SHARED;
    type Row = AckRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        self.0.params()
    }
}

pub const RENEW_SHARED: CallSpec = CallSpec {
    name: "qw_renew_shared_v1",
    sql: "SELECT idx, lease_expires_at FROM queen.log_renew_shared_v1(p_partition_ids => $1, p_offsets => $2, p_groups => $3, p_lease_tokens => $4, p_extend_ms => $5, p_tenant => $6)",
    params: &[
        Type::INT8_ARRAY,
        Type::INT8_ARRAY,
        Type::TEXT_ARRAY,
        Type::UUID_ARRAY,
        Type::INT8,
        Type::UUID,
    ],
    columns: RENEW.columns,
};

/// RENEW of a shared group's receipts: each message's own lease.
pub struct RenewShared<'a> {
    pub partition_ids: Vec<i64>,
    pub offsets: Vec<i64>,
    pub groups: Vec<&'a str>,
    pub lease_tokens: Vec<Uuid>,
    pub extend_ms: Option<i64>,
    pub tenant: Uuid,
}

impl Call for RenewShared<'_> {
    const SPEC: &'static CallSpec = &RENEW_SHARED;
    type Row = RenewRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![
            &self.partition_ids,
            &self.offsets,
            &self.groups,
            &self.lease_tokens,
            &self.extend_ms,
            &self.tenant,
        ]
    }
}
