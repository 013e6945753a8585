//! Boot-time schema apply: `sql/schema.sql`, then every
//! `sql/procedures/NNN_name.sql` in lexical order, each statement in its own
//! transaction, under session advisory lock 778120010 so that several
//! proxies booting on one database take turns. Every file is idempotent, so
//! this runs at every boot; `QUEEN_APPLY_SCHEMA=0` skips it (for a
//! deployment whose DDL a privileged role applied beforehand).

use crate::backend::call::{execute, query, ClientCallError};
use crate::calls::maintenance::{AdvisoryLock, AdvisoryUnlock, ServerVersion};
use crate::rewrite::split::split_statements;

/// The advisory lock key the seeds give the schema apply.
pub const SCHEMA_LOCK: i64 = 778120010;

macro_rules! procedure {
    ($name:literal) => {
        ($name, include_str!(concat!("../../sql/procedures/", $name)))
    };
}

pub const SCHEMA_FILE: (&str, &str) = ("schema.sql", include_str!("../../sql/schema.sql"));

/// The procedure files, in the order they are applied. A test checks this
/// list against the directory.
pub const PROCEDURE_FILES: &[(&str, &str)] = &[
    procedure!("001_log_schema.sql"),
    procedure!("002_streams_schema.sql"),
    procedure!("003_log_push.sql"),
    procedure!("004_log_pop.sql"),
    procedure!("005_log_ack.sql"),
    procedure!("006_log_maintenance.sql"),
    procedure!("007_log_streams.sql"),
    procedure!("008_streams_registry.sql"),
    procedure!("009_streams_show.sql"),
    procedure!("010_log_admin.sql"),
    procedure!("011_log_stats.sql"),
    procedure!("012_configure.sql"),
    procedure!("013_analytics.sql"),
    procedure!("014_consumer_groups.sql"),
    procedure!("015_status.sql"),
    procedure!("016_messages.sql"),
    procedure!("017_traces.sql"),
    procedure!("018_stats_readers.sql"),
    procedure!("019_worker_metrics.sql"),
    procedure!("020_log_partition_counters.sql"),
    procedure!("024_kv.sql"),
    procedure!("025_timers.sql"),
    procedure!("026_kv_sweep.sql"),
    procedure!("027_kv_quota.sql"),
    procedure!("028_retained_bytes.sql"),
    procedure!("029_maintenance_leases.sql"),
    procedure!("030_ephemeral.sql"),
    procedure!("031_tenant_purge.sql"),
    procedure!("032_log_shared.sql"),
    procedure!("034_privileges.sql"),
];

/// The oldest PostgreSQL the schema supports (NULLS NOT DISTINCT needs 15).
pub const MIN_SERVER_VERSION_NUM: i32 = 150000;

#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    #[error("PostgreSQL {found} is too old: queenwire needs PostgreSQL 15 or newer")]
    TooOld { found: String },
    #[error("applying {file}, statement {index}: {source}")]
    Apply {
        file: &'static str,
        index: usize,
        source: tokio_postgres::Error,
    },
    #[error(transparent)]
    Db(#[from] tokio_postgres::Error),
    #[error(transparent)]
    Decode(#[from] crate::calls::DecodeError),
}

impl From<ClientCallError> for SchemaError {
    fn from(e: ClientCallError) -> Self {
        match e {
            ClientCallError::Db(e) => SchemaError::Db(e),
            ClientCallError::Decode(e) => SchemaError::Decode(e),
        }
    }
}

/// Refuses a backend older than PostgreSQL 15.
pub async fn check_version(client: &tokio_postgres::Client) -> Result<(), SchemaError> {
    let rows = query(client, &ServerVersion).await?;
    let Some(version) = rows.into_iter().next() else {
        return Err(SchemaError::TooOld {
            found: "unknown".into(),
        });
    };
    if version.version_num < MIN_SERVER_VERSION_NUM {
        return Err(SchemaError::TooOld {
            found: version.version,
        });
    }
    Ok(())
}

/// Every embedded file in apply order.
pub fn files() -> impl Iterator<Item = (&'static str, &'static str)> {
    std::iter::once(SCHEMA_FILE).chain(PROCEDURE_FILES.iter().copied())
}

/// Applies the whole schema under the advisory lock.
pub async fn apply(client: &tokio_postgres::Client) -> Result<(), SchemaError> {
    execute(client, &AdvisoryLock { key: SCHEMA_LOCK }).await?;
    let result = apply_locked(client).await;
    let unlock = execute(client, &AdvisoryUnlock { key: SCHEMA_LOCK }).await;
    result?;
    unlock?;
    Ok(())
}

async fn apply_locked(client: &tokio_postgres::Client) -> Result<(), SchemaError> {
    for (file, text) in files() {
        for (index, range) in split_statements(text).into_iter().enumerate() {
            // A simple-query message holding one statement runs in its own
            // implicit transaction.
            client
                .batch_execute(&text[range])
                .await
                .map_err(|source| SchemaError::Apply {
                    file,
                    index: index + 1,
                    source,
                })?;
        }
    }
    Ok(())
}
