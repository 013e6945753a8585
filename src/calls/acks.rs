//! ACK and RENEW: `log_ack_v1` (receipt by receipt, and every FAILED),
//! `log_ack_v2` (a plain ACK's receipts as runs of offsets) and
//! `log_renew_v1`; for a shared group's receipts (each message leased on
//! its own), `log_ack_shared_v1` and `log_renew_shared_v1`. The engine checks the receipts' HMAC and builds the runs
//! (`engine/acks.rs`).

use super::declare::calls;
use super::{Call, CallSpec};
use std::time::SystemTime;
use tokio_postgres::types::ToSql;
use uuid::Uuid;

calls! {
    pub const ACK = "qw_ack_v1" {
        SELECT * FROM queen.log_ack_v1;
        /// Acknowledges messages, parallel arrays by receipt.
        pub struct Ack<'a> {
            partition_ids: Vec<i64> = INT8_ARRAY,
            offsets: Vec<i64> = INT8_ARRAY,
            groups: Vec<&'a str> = TEXT_ARRAY,
            lease_tokens: Vec<Uuid> = UUID_ARRAY,
            failed: bool = BOOL,
            reason: Option<String> = TEXT,
            tenant: Uuid = UUID,
        }
        #[derive(Debug, Clone, PartialEq)]
        pub struct AckRow {
            /// Index of the receipt in the call's arrays.
            idx: i32 = INT4,
            status: String = TEXT,
        }
    }

    pub const ACK_RUNS = "qw_ack_v2" {
        SELECT * FROM queen.log_ack_v2;
        /// Acknowledges runs of receipts (a plain ACK): run i is every offset
        /// `from[i] ..= to[i]` of (partition, group, lease token), parallel arrays.
        pub struct AckRuns<'a> {
            partition_ids: Vec<i64> = INT8_ARRAY,
            groups: Vec<&'a str> = TEXT_ARRAY,
            lease_tokens: Vec<Uuid> = UUID_ARRAY,
            from: Vec<i64> = INT8_ARRAY,
            to: Vec<i64> = INT8_ARRAY,
            tenant: Uuid = UUID,
        }
        #[derive(Debug, Clone, PartialEq)]
        pub struct AckRunRow {
            /// Index of the run in the call's arrays.
            idx: i32 = INT4,
            /// `None`: the status of every offset of the run.
            message_offset: Option<i64> = INT8,
            status: String = TEXT,
        }
    }

    pub const RENEW = "qw_renew_v1" {
        SELECT * FROM queen.log_renew_v1;
        pub struct Renew<'a> {
            partition_ids: Vec<i64> = INT8_ARRAY,
            groups: Vec<&'a str> = TEXT_ARRAY,
            lease_tokens: Vec<Uuid> = UUID_ARRAY,
            /// `None`: each queue's own lease time.
            extend_ms: Option<i64> = INT8,
            tenant: Uuid = UUID,
        }
        #[derive(Debug, Clone, PartialEq)]
        pub struct RenewRow {
            idx: i32 = INT4,
            lease_expires_at: Option<SystemTime> = TIMESTAMPTZ,
        }
    }

    pub const ACK_SHARED = "qw_ack_shared_v1" {
        SELECT * FROM queen.log_ack_shared_v1;
        args(
            partition_ids: INT8_ARRAY,
            offsets: INT8_ARRAY,
            groups: TEXT_ARRAY,
            lease_tokens: UUID_ARRAY,
            failed: BOOL,
            reason: TEXT,
            tenant: UUID,
        );
        row AckRow { idx: INT4, status: TEXT }
    }

    pub const RENEW_SHARED = "qw_renew_shared_v1" {
        SELECT * FROM queen.log_renew_shared_v1;
        /// RENEW of a shared group's receipts: each message's own lease.
        pub struct RenewShared<'a> {
            partition_ids: Vec<i64> = INT8_ARRAY,
            offsets: Vec<i64> = INT8_ARRAY,
            groups: Vec<&'a str> = TEXT_ARRAY,
            lease_tokens: Vec<Uuid> = UUID_ARRAY,
            extend_ms: Option<i64> = INT8,
            tenant: Uuid = UUID,
        }
        row RenewRow { idx: INT4, lease_expires_at: TIMESTAMPTZ }
    }
}

/// [`Ack`] of a shared group's receipts: each message alone.
pub struct AckShared<'a>(pub Ack<'a>);

impl Call for AckShared<'_> {
    const SPEC: &'static CallSpec = &ACK_SHARED;
    type Row = AckRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        self.0.params()
    }
}
