//! The ephemeral queue class (030_ephemeral): its CREATE / ALTER QUEUE, the
//! tenant's declarations (SHOW QUEUES), and the engine's own calls — every
//! ephemeral queue's name, the owner's lease, the tokens of PUSHes waiting
//! for their transaction block to commit.

use super::admin::Configure;
use super::declare::calls;
use super::{Call, CallSpec, DecodeError, FromRow, Row};
use std::time::SystemTime;
use tokio_postgres::types::ToSql;
use uuid::Uuid;

calls! {
    pub const CONFIGURE = "qw_ephemeral_configure_v1" {
        SELECT queen.ephemeral_configure_v1;
        args(queue: TEXT, options: TEXT::jsonb, mode: TEXT, tenant: UUID);
        row () { outcome: TEXT }
    }

    pub const QUEUES = "qw_ephemeral_queues_v1" {
        SELECT * FROM queen.ephemeral_queues_v1;
        pub struct Queues {
            tenant: Uuid = UUID,
        }
        row QueueRow {
            queue_name: TEXT,
            ref: INT8,
            max_length: INT8,
            max_bytes: INT8,
            ttl_ms: INT8,
            overflow: TEXT,
            holder: TEXT,
            held_until: TIMESTAMPTZ,
        }
    }

    pub const NAMES = "qw_ephemeral_names_v1" {
        SELECT * FROM queen.ephemeral_names_v1;
        pub struct Names;
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct NameRow {
            tenant_id: Uuid = UUID,
            queue_name: String = TEXT,
            ref_ as ref: i64 = INT8,
        }
    }

    pub const CLAIM = "qw_ephemeral_claim_v2" {
        SELECT * FROM queen.ephemeral_claim_v2;
        pub struct Claim<'a> {
            ref_ as ref: i64 = INT8,
            holder: &'a str = TEXT,
            ttl_ms: i64 = INT8,
        }
        /// An ephemeral queue's declaration and who owns it now.
        #[derive(Debug, Clone, PartialEq)]
        pub struct ClaimRow {
            tenant_id: Uuid = UUID,
            queue_name: String = TEXT,
            max_length: Option<i64> = INT8,
            max_bytes: Option<i64> = INT8,
            ttl_ms: i64 = INT8,
            overflow: String = TEXT,
            lease_time: i32 = INT4,
            retry_limit: i32 = INT4,
            /// Milliseconds.
            retry_delay: i32 = INT4,
            /// Seconds.
            delayed_processing: i32 = INT4,
            /// Seconds.
            window_buffer: i32 = INT4,
            /// Seconds.
            dedup_window: i32 = INT4,
            holder: String = TEXT,
            held_until: SystemTime = TIMESTAMPTZ,
        }
    }

    pub const COMMIT_MARK = "qw_ephemeral_commit_mark_v1" {
        "SELECT queen.ephemeral_commit_mark_v1(p_token => $1, p_tenant => $2) IS NULL AS marked";
        /// The token an ephemeral PUSH inside a transaction block waits under.
        pub struct CommitMark {
            token: Uuid = UUID,
            tenant: Uuid = UUID,
        }
        row () { marked: BOOL }
    }

    pub const COMMIT_TAKE = "qw_ephemeral_commit_take_v1" {
        SELECT * FROM queen.ephemeral_commit_take_v1;
        pub struct CommitTake<'a> {
            tokens: &'a [Uuid] = UUID_ARRAY,
        }
        pub struct Committed {
            token: Uuid = UUID,
        }
    }

    pub const PEER_PUBLISH = "qw_ephemeral_peer_publish_v1" {
        "SELECT queen.ephemeral_peer_publish_v1(p_holder => $1, p_address => $2, p_secret => $3) IS NULL AS published";
        /// Where this queenwire serves forwarded ephemeral statements, and the
        /// secret a forwarding queenwire must prove it knows.
        pub struct PeerPublish<'a> {
            holder: &'a str = TEXT,
            address: &'a str = TEXT,
            secret: &'a [u8] = BYTEA,
        }
        row () { published: BOOL }
    }

    pub const PEER = "qw_ephemeral_peer_v1" {
        SELECT * FROM queen.ephemeral_peer_v1;
        /// Where another queenwire (a lease holder) serves forwarded statements.
        pub struct Peer<'a> {
            holder: &'a str = TEXT,
        }
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct PeerRow {
            address: String = TEXT,
            secret: Vec<u8> = BYTEA,
        }
    }

    pub const RELEASE = "qw_ephemeral_release_v1" {
        SELECT queen.ephemeral_release_v1;
        /// A stopping queenwire's ephemeral leases end now, its peer row goes.
        pub struct Release<'a> {
            holder: &'a str = TEXT,
        }
        row () { ended: INT8 }
    }
}

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
