//! The ephemeral queue class (030_ephemeral): its CREATE / ALTER QUEUE, the
//! tenant's declarations (SHOW QUEUES), and the engine's own calls — every
//! ephemeral queue's name, the owner's lease, the tokens of PUSHes waiting
//! for their transaction block to commit.

use super::admin::Configure;
use super::{column, Call, CallSpec, DecodeError, FromRow, Row};
use std::time::SystemTime;
use tokio_postgres::types::{ToSql, Type};
use uuid::Uuid;

pub const CONFIGURE: CallSpec = CallSpec {
    name: "qw_ephemeral_configure_v1",
    sql: "SELECT queen.ephemeral_configure_v1(p_queue => $1, p_options => $2::jsonb, p_mode => $3, p_tenant => $4) AS outcome",
    params: &[Type::TEXT, Type::TEXT, Type::TEXT, Type::UUID],
    columns: &[column("outcome", Type::TEXT)],
};

/// CREATE / ALTER QUEUE naming an ephemeral option: the same values as
/// `configure_queue_v1`'s, through `ephemeral_configure_v1`.
pub struct EphemeralConfigure<'a>(pub &'a Configure);

impl Call for EphemeralConfigure<'_> {
    const SPEC: &'static CallSpec = &CONFIGURE;
    type Row = ();
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        let c = self.0;
        vec![&c.queue, &c.options, &c.mode, &c.tenant]
    }
}

pub const QUEUES: CallSpec = CallSpec {
    name: "qw_ephemeral_queues_v1",
    sql: "SELECT queue_name, ref, max_length, max_bytes, ttl_ms, overflow, holder, held_until FROM queen.ephemeral_queues_v1(p_tenant => $1)",
    params: &[Type::UUID],
    columns: &[
        column("queue_name", Type::TEXT),
        column("ref", Type::INT8),
        column("max_length", Type::INT8),
        column("max_bytes", Type::INT8),
        column("ttl_ms", Type::INT8),
        column("overflow", Type::TEXT),
        column("holder", Type::TEXT),
        column("held_until", Type::TIMESTAMPTZ),
    ],
};

pub struct Queues {
    pub tenant: Uuid,
}

impl Call for Queues {
    const SPEC: &'static CallSpec = &QUEUES;
    type Row = QueueRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![&self.tenant]
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct QueueRow {
    pub queue_name: String,
    pub ref_: i64,
    pub holder: Option<String>,
    pub held_until: Option<SystemTime>,
}

impl FromRow for QueueRow {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        Ok(QueueRow {
            queue_name: row.get("queue_name")?,
            ref_: row.get("ref")?,
            holder: row.get("holder")?,
            held_until: row.get("held_until")?,
        })
    }
}

pub const NAMES: CallSpec = CallSpec {
    name: "qw_ephemeral_names_v1",
    sql: "SELECT tenant_id, queue_name, ref FROM queen.ephemeral_names_v1()",
    params: &[],
    columns: &[
        column("tenant_id", Type::UUID),
        column("queue_name", Type::TEXT),
        column("ref", Type::INT8),
    ],
};

pub struct Names;

impl Call for Names {
    const SPEC: &'static CallSpec = &NAMES;
    type Row = NameRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        Vec::new()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameRow {
    pub tenant_id: Uuid,
    pub queue_name: String,
    pub ref_: i64,
}

impl FromRow for NameRow {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        Ok(NameRow {
            tenant_id: row.get("tenant_id")?,
            queue_name: row.get("queue_name")?,
            ref_: row.get("ref")?,
        })
    }
}

pub const CLAIM: CallSpec = CallSpec {
    name: "qw_ephemeral_claim_v2",
    sql: "SELECT tenant_id, queue_name, max_length, max_bytes, ttl_ms, overflow, lease_time, retry_limit, retry_delay, delayed_processing, window_buffer, dedup_window, holder, held_until FROM queen.ephemeral_claim_v2(p_ref => $1, p_holder => $2, p_ttl_ms => $3)",
    params: &[Type::INT8, Type::TEXT, Type::INT8],
    columns: &[
        column("tenant_id", Type::UUID),
        column("queue_name", Type::TEXT),
        column("max_length", Type::INT8),
        column("max_bytes", Type::INT8),
        column("ttl_ms", Type::INT8),
        column("overflow", Type::TEXT),
        column("lease_time", Type::INT4),
        column("retry_limit", Type::INT4),
        column("retry_delay", Type::INT4),
        column("delayed_processing", Type::INT4),
        column("window_buffer", Type::INT4),
        column("dedup_window", Type::INT4),
        column("holder", Type::TEXT),
        column("held_until", Type::TIMESTAMPTZ),
    ],
};

pub struct Claim<'a> {
    pub ref_: i64,
    pub holder: &'a str,
    pub ttl_ms: i64,
}

impl Call for Claim<'_> {
    const SPEC: &'static CallSpec = &CLAIM;
    type Row = ClaimRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![&self.ref_, &self.holder, &self.ttl_ms]
    }
}

/// An ephemeral queue's declaration and who owns it now.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimRow {
    pub tenant_id: Uuid,
    pub queue_name: String,
    pub max_length: Option<i64>,
    pub max_bytes: Option<i64>,
    pub ttl_ms: i64,
    pub overflow: String,
    pub lease_time: i32,
    pub retry_limit: i32,
    /// Milliseconds.
    pub retry_delay: i32,
    /// Seconds.
    pub delayed_processing: i32,
    /// Seconds.
    pub window_buffer: i32,
    /// Seconds.
    pub dedup_window: i32,
    pub holder: String,
    pub held_until: SystemTime,
}

impl FromRow for ClaimRow {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        Ok(ClaimRow {
            tenant_id: row.get("tenant_id")?,
            queue_name: row.get("queue_name")?,
            max_length: row.get("max_length")?,
            max_bytes: row.get("max_bytes")?,
            ttl_ms: row.get("ttl_ms")?,
            overflow: row.get("overflow")?,
            lease_time: row.get("lease_time")?,
            retry_limit: row.get("retry_limit")?,
            retry_delay: row.get("retry_delay")?,
            delayed_processing: row.get("delayed_processing")?,
            window_buffer: row.get("window_buffer")?,
            dedup_window: row.get("dedup_window")?,
            holder: row.get("holder")?,
            held_until: row.get("held_until")?,
        })
    }
}

pub const COMMIT_MARK: CallSpec = CallSpec {
    name: "qw_ephemeral_commit_mark_v1",
    sql: "SELECT queen.ephemeral_commit_mark_v1(p_token => $1, p_tenant => $2) IS NULL AS marked",
    params: &[Type::UUID, Type::UUID],
    columns: &[column("marked", Type::BOOL)],
};

/// The token an ephemeral PUSH inside a transaction block waits under.
pub struct CommitMark {
    pub token: Uuid,
    pub tenant: Uuid,
}

impl Call for CommitMark {
    const SPEC: &'static CallSpec = &COMMIT_MARK;
    type Row = ();
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![&self.token, &self.tenant]
    }
}

pub const COMMIT_TAKE: CallSpec = CallSpec {
    name: "qw_ephemeral_commit_take_v1",
    sql: "SELECT token FROM queen.ephemeral_commit_take_v1(p_tokens => $1)",
    params: &[Type::UUID_ARRAY],
    columns: &[column("token", Type::UUID)],
};

pub struct CommitTake<'a> {
    pub tokens: &'a [Uuid],
}

impl Call for CommitTake<'_> {
    const SPEC: &'static CallSpec = &COMMIT_TAKE;
    type Row = Committed;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![&self.tokens]
    }
}

pub struct Committed {
    pub token: Uuid,
}

impl FromRow for Committed {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        Ok(Committed {
            token: row.get("token")?,
        })
    }
}

pub const PEER_PUBLISH: CallSpec = CallSpec {
    name: "qw_ephemeral_peer_publish_v1",
    sql: "SELECT queen.ephemeral_peer_publish_v1(p_holder => $1, p_address => $2, p_secret => $3) IS NULL AS published",
    params: &[Type::TEXT, Type::TEXT, Type::BYTEA],
    columns: &[column("published", Type::BOOL)],
};

/// Where this queenwire serves forwarded ephemeral statements, and the
/// secret a forwarding queenwire must prove it knows.
pub struct PeerPublish<'a> {
    pub holder: &'a str,
    pub address: &'a str,
    pub secret: &'a [u8],
}

impl Call for PeerPublish<'_> {
    const SPEC: &'static CallSpec = &PEER_PUBLISH;
    type Row = ();
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![&self.holder, &self.address, &self.secret]
    }
}

pub const PEER: CallSpec = CallSpec {
    name: "qw_ephemeral_peer_v1",
    sql: "SELECT address, secret FROM queen.ephemeral_peer_v1(p_holder => $1)",
    params: &[Type::TEXT],
    columns: &[column("address", Type::TEXT), column("secret", Type::BYTEA)],
};

/// Where another queenwire (a lease holder) serves forwarded statements.
pub struct Peer<'a> {
    pub holder: &'a str,
}

impl Call for Peer<'_> {
    const SPEC: &'static CallSpec = &PEER;
    type Row = PeerRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![&self.holder]
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerRow {
    pub address: String,
    pub secret: Vec<u8>,
}

impl FromRow for PeerRow {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        Ok(PeerRow {
            address: row.get("address")?,
            secret: row.get("secret")?,
        })
    }
}

pub const RELEASE: CallSpec = CallSpec {
    name: "qw_ephemeral_release_v1",
    sql: "SELECT queen.ephemeral_release_v1(p_holder => $1) AS ended",
    params: &[Type::TEXT],
    columns: &[column("ended", Type::INT8)],
};

/// A stopping queenwire's ephemeral leases end now, its peer row goes.
pub struct Release<'a> {
    pub holder: &'a str,
}

impl Call for Release<'_> {
    const SPEC: &'static CallSpec = &RELEASE;
    type Row = ();
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![&self.holder]
    }
}
