//! The background tasks' calls, each on a connection of its own: the KV
//! quota poll, the maintenance leases, expiry of pending messages, the KV
//! sweeper, the NOTIFY of pushes to other processes and the boot-time
//! schema apply's lock and version check.

use super::{column, Call, CallSpec, DecodeError, FromRow, Row};
use tokio_postgres::types::{ToSql, Type};
use uuid::Uuid;

pub const QUOTA_POLL: CallSpec = CallSpec {
    name: "qw_kv_quota_poll_v1",
    sql:
        "SELECT tenant_id, max_keys, max_bytes, used_keys, used_bytes FROM queen.kv_quota_poll_v1()",
    params: &[],
    columns: &[
        column("tenant_id", Type::UUID),
        column("max_keys", Type::INT8),
        column("max_bytes", Type::INT8),
        column("used_keys", Type::INT8),
        column("used_bytes", Type::INT8),
    ],
};

pub struct QuotaPoll;

impl Call for QuotaPoll {
    const SPEC: &'static CallSpec = &QUOTA_POLL;
    type Row = QuotaRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        Vec::new()
    }
}

/// A tenant's KV quota and its usage as last measured (no usage yet: NULL).
#[derive(Debug, Clone, PartialEq)]
pub struct QuotaRow {
    pub tenant_id: Uuid,
    pub max_keys: Option<i64>,
    pub max_bytes: Option<i64>,
    pub used_keys: Option<i64>,
    pub used_bytes: Option<i64>,
}

impl FromRow for QuotaRow {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        Ok(QuotaRow {
            tenant_id: row.get("tenant_id")?,
            max_keys: row.get("max_keys")?,
            max_bytes: row.get("max_bytes")?,
            used_keys: row.get("used_keys")?,
            used_bytes: row.get("used_bytes")?,
        })
    }
}

pub const TRY_LEASE: CallSpec = CallSpec {
    name: "qw_maintenance_try_lease_v1",
    sql: "SELECT queen.maintenance_try_lease_v1(p_task => $1, p_holder => $2, p_ttl_ms => $3) AS elected",
    params: &[Type::TEXT, Type::TEXT, Type::INT8],
    columns: &[column("elected", Type::BOOL)],
};

/// Takes or renews the lease of one maintenance task for `holder`.
pub struct TryLease<'a> {
    pub task: &'static str,
    pub holder: &'a str,
    pub ttl_ms: i64,
}

impl Call for TryLease<'_> {
    const SPEC: &'static CallSpec = &TRY_LEASE;
    type Row = Elected;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![&self.task, &self.holder, &self.ttl_ms]
    }
}

pub struct Elected {
    pub elected: bool,
}

impl FromRow for Elected {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        Ok(Elected {
            elected: row.get("elected")?,
        })
    }
}

pub const EXPIRE_PENDING: CallSpec = CallSpec {
    name: "qw_log_expire_pending_v1",
    sql: "SELECT queen.log_expire_pending_v1(p_limit => $1) AS moved",
    params: &[Type::INT4],
    columns: &[column("moved", Type::INT4)],
};

pub struct ExpirePending {
    pub limit: i32,
}

impl Call for ExpirePending {
    const SPEC: &'static CallSpec = &EXPIRE_PENDING;
    type Row = Moved;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![&self.limit]
    }
}

pub struct Moved {
    pub moved: i32,
}

impl FromRow for Moved {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        Ok(Moved {
            moved: row.get("moved")?,
        })
    }
}

pub const PRUNE_SHARD: CallSpec = CallSpec {
    name: "qw_kv_prune_shard_v1",
    sql: "SELECT queen.kv_prune_shard_v1(p_shard => $1, p_limit => $2) AS deleted",
    params: &[Type::INT4, Type::INT4],
    columns: &[column("deleted", Type::INT4)],
};

pub struct PruneShard {
    pub shard: i32,
    pub limit: i32,
}

impl Call for PruneShard {
    const SPEC: &'static CallSpec = &PRUNE_SHARD;
    type Row = ();
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![&self.shard, &self.limit]
    }
}

pub const USAGE_ROLLUP: CallSpec = CallSpec {
    name: "qw_kv_usage_rollup_v1",
    sql: "SELECT queen.kv_usage_rollup_v1() AS written",
    params: &[],
    columns: &[column("written", Type::INT4)],
};

pub struct UsageRollup;

impl Call for UsageRollup {
    const SPEC: &'static CallSpec = &USAGE_ROLLUP;
    type Row = ();
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        Vec::new()
    }
}

/// The channel of push wake-ups between queenwire processes.
pub const WAKE_CHANNEL: &str = "queenwire_push";

/// `LISTEN` on [`WAKE_CHANNEL`] (a test checks they agree).
pub const LISTEN_WAKEUPS: &str = "LISTEN queenwire_push";

pub const NOTIFY_PUSHED: CallSpec = CallSpec {
    name: "qw_notify_pushed",
    sql: "SELECT pg_notify($1, k) FROM unnest($2::text[]) k",
    params: &[Type::TEXT, Type::TEXT_ARRAY],
    columns: &[column("pg_notify", Type::VOID)],
};

/// One NOTIFY on `channel` per payload.
pub struct NotifyPushed<'a> {
    pub channel: &'static str,
    pub payloads: &'a [String],
}

impl Call for NotifyPushed<'_> {
    const SPEC: &'static CallSpec = &NOTIFY_PUSHED;
    type Row = ();
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![&self.channel, &self.payloads]
    }
}

pub const ADVISORY_LOCK: CallSpec = CallSpec {
    name: "qw_advisory_lock",
    sql: "SELECT pg_advisory_lock($1)",
    params: &[Type::INT8],
    columns: &[column("pg_advisory_lock", Type::VOID)],
};

pub const ADVISORY_UNLOCK: CallSpec = CallSpec {
    name: "qw_advisory_unlock",
    sql: "SELECT pg_advisory_unlock($1)",
    params: &[Type::INT8],
    columns: &[column("pg_advisory_unlock", Type::BOOL)],
};

/// Takes (`unlock: false`) or releases a session advisory lock.
pub struct AdvisoryLock {
    pub key: i64,
}

impl Call for AdvisoryLock {
    const SPEC: &'static CallSpec = &ADVISORY_LOCK;
    type Row = ();
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![&self.key]
    }
}

pub struct AdvisoryUnlock {
    pub key: i64,
}

impl Call for AdvisoryUnlock {
    const SPEC: &'static CallSpec = &ADVISORY_UNLOCK;
    type Row = ();
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![&self.key]
    }
}

pub const SERVER_VERSION: CallSpec = CallSpec {
    name: "qw_server_version",
    sql: "SELECT current_setting('server_version_num')::int AS version_num, current_setting('server_version') AS version",
    params: &[],
    columns: &[
        column("version_num", Type::INT4),
        column("version", Type::TEXT),
    ],
};

pub struct ServerVersion;

impl Call for ServerVersion {
    const SPEC: &'static CallSpec = &SERVER_VERSION;
    type Row = VersionRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        Vec::new()
    }
}

pub struct VersionRow {
    pub version_num: i32,
    pub version: String,
}

impl FromRow for VersionRow {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        Ok(VersionRow {
            version_num: row.get("version_num")?,
            version: row.get("version")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_names_the_wake_channel() {
        assert_eq!(LISTEN_WAKEUPS, format!("LISTEN {WAKE_CHANNEL}"));
    }
}
