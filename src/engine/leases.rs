//! The maintenance leases of seed 029: each elected task runs in exactly
//! one queenwire per cycle, the one that took (or renewed) the task's lease.

use crate::backend::call::{query, ClientCallError};
use crate::calls::maintenance::TryLease;
use std::time::Duration;

/// Whether this process holds (took or renewed) the lease of `task`, for
/// `ttl` from now.
pub async fn elected(
    client: &tokio_postgres::Client,
    task: &'static str,
    holder: &str,
    ttl: Duration,
) -> Result<bool, ClientCallError> {
    let call = TryLease {
        task,
        holder,
        ttl_ms: i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX).max(1),
    };
    Ok(query(client, &call).await?.iter().any(|r| r.elected))
}
