//! The background tasks' calls, each on a connection of its own: the KV
//! quota poll, the maintenance leases, expiry of pending messages, the KV
//! sweeper, the NOTIFY of pushes to other processes and the boot-time
//! schema apply's lock and version check.

use super::declare::calls;
use uuid::Uuid;

/// The channel of push wake-ups between queenwire processes.
pub const WAKE_CHANNEL: &str = "queenwire_push";

/// `LISTEN` on [`WAKE_CHANNEL`] (a test checks they agree).
pub const LISTEN_WAKEUPS: &str = "LISTEN queenwire_push";

calls! {
    pub const QUOTA_POLL = "qw_kv_quota_poll_v1" {
        SELECT * FROM queen.kv_quota_poll_v1;
        pub struct QuotaPoll;
        /// A tenant's KV quota and its usage as last measured (no usage yet: NULL).
        #[derive(Debug, Clone, PartialEq)]
        pub struct QuotaRow {
            tenant_id: Uuid = UUID,
            max_keys: Option<i64> = INT8,
            max_bytes: Option<i64> = INT8,
            used_keys: Option<i64> = INT8,
            used_bytes: Option<i64> = INT8,
        }
    }

    pub const TRY_LEASE = "qw_maintenance_try_lease_v1" {
        SELECT queen.maintenance_try_lease_v1;
        /// Takes or renews the lease of one maintenance task for `holder`.
        pub struct TryLease<'a> {
            task: &'static str = TEXT,
            holder: &'a str = TEXT,
            ttl_ms: i64 = INT8,
        }
        pub struct Elected {
            elected: bool = BOOL,
        }
    }

    pub const EXPIRE_PENDING = "qw_log_expire_pending_v1" {
        SELECT queen.log_expire_pending_v1;
        pub struct ExpirePending {
            limit: i32 = INT4,
        }
        pub struct Moved {
            moved: i32 = INT4,
        }
    }

    pub const PRUNE_SHARD = "qw_kv_prune_shard_v1" {
        SELECT queen.kv_prune_shard_v1;
        pub struct PruneShard {
            shard: i32 = INT4,
            limit: i32 = INT4,
        }
        row () { deleted: INT4 }
    }

    pub const USAGE_ROLLUP = "qw_kv_usage_rollup_v1" {
        SELECT queen.kv_usage_rollup_v1;
        pub struct UsageRollup;
        row () { written: INT4 }
    }

    pub const NOTIFY_PUSHED = "qw_notify_pushed" {
        "SELECT pg_notify($1, k) FROM unnest($2::text[]) k";
        /// One NOTIFY on `channel` per payload.
        pub struct NotifyPushed<'a> {
            channel: &'static str = TEXT,
            payloads: &'a [String] = TEXT_ARRAY,
        }
        row () { pg_notify: VOID }
    }

    pub const ADVISORY_LOCK = "qw_advisory_lock" {
        "SELECT pg_advisory_lock($1)";
        /// Takes a session advisory lock ([`AdvisoryUnlock`] releases it).
        pub struct AdvisoryLock {
            key: i64 = INT8,
        }
        row () { pg_advisory_lock: VOID }
    }

    pub const ADVISORY_UNLOCK = "qw_advisory_unlock" {
        "SELECT pg_advisory_unlock($1)";
        pub struct AdvisoryUnlock {
            key: i64 = INT8,
        }
        row () { pg_advisory_unlock: BOOL }
    }

    pub const SERVER_VERSION = "qw_server_version" {
        "SELECT current_setting('server_version_num')::int AS version_num, current_setting('server_version') AS version";
        pub struct ServerVersion;
        pub struct VersionRow {
            version_num: i32 = INT4,
            version: String = TEXT,
        }
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
