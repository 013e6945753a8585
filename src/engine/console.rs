//! The admin view (`SHOW QUEENWIRE …`), answered from the proxy's own
//! state without a backend round trip.
//!
//! Who sees what: pools and per-kind statement counters are the same for
//! everyone connected (they name roles and counts, no client). Clients and
//! the backend connections they hold are shown for the caller's own tenant
//! only — except without a users file, where every client is a trusted
//! loopback client acting as queenwire's own role and sees them all.

use super::values::Cell;
use crate::metrics::{Kind, Metrics};
use crate::rewrite::dialect::console::Console;
use std::sync::atomic::Ordering;
use uuid::Uuid;

/// The rows of one view, for a caller in `tenant`.
pub fn rows(m: &Metrics, view: Console, tenant: Uuid) -> Vec<Vec<Cell>> {
    let int8 = |n: usize| Cell::Int8(i64::try_from(n).unwrap_or(i64::MAX));
    match view {
        Console::Pools => m
            .pool_status()
            .into_iter()
            .map(|p| {
                vec![
                    Cell::Text(p.role),
                    int8(p.active),
                    int8(p.idle),
                    int8(p.waiting),
                    int8(p.max),
                ]
            })
            .collect(),
        Console::Clients => m
            .clients
            .list()
            .into_iter()
            .filter(|c| m.trusted_clients || c.tenant == tenant)
            .map(|c| {
                vec![
                    Cell::Int8(i64::try_from(c.id).unwrap_or(i64::MAX)),
                    Cell::Text(c.user.clone()),
                    Cell::Uuid(c.tenant),
                    Cell::Text(c.state().as_str().to_string()),
                    Cell::Bool(c.pinned()),
                    Cell::timestamp(Some(c.since)),
                    Cell::Text(c.application_name.clone()),
                    Cell::Text(c.client_addr.clone()),
                    c.backend_pid().map_or(Cell::Null, Cell::Int4),
                ]
            })
            .collect(),
        Console::Servers => m
            .clients
            .list()
            .into_iter()
            .filter(|c| m.trusted_clients || c.tenant == tenant)
            .filter_map(|c| {
                let pid = c.backend_pid()?;
                let state = match c.state() {
                    crate::metrics::clients::State::Active => "active",
                    crate::metrics::clients::State::Idle => "idle",
                    crate::metrics::clients::State::IdleInTransaction => "idle in transaction",
                    crate::metrics::clients::State::IdleInFailedTransaction => {
                        "idle in transaction (aborted)"
                    }
                };
                Some(vec![
                    Cell::Int4(pid),
                    Cell::Text(state.to_string()),
                    Cell::Int8(i64::try_from(c.id).unwrap_or(i64::MAX)),
                    Cell::Text(c.user.clone()),
                    Cell::Uuid(c.tenant),
                ])
            })
            .collect(),
        Console::Stats => Kind::ALL
            .iter()
            .map(|&kind| {
                let s = m.kind(kind);
                let snap = s.latency.snapshot();
                let total_us = (snap.sum_seconds * 1e6) as i64;
                let n = i64::try_from(snap.count).unwrap_or(i64::MAX);
                vec![
                    Cell::Text(kind.as_str().to_string()),
                    Cell::Int8(i64::try_from(s.ok.load(Ordering::Relaxed)).unwrap_or(i64::MAX)),
                    Cell::Int8(i64::try_from(s.failed.load(Ordering::Relaxed)).unwrap_or(i64::MAX)),
                    Cell::Int8(total_us),
                    Cell::Int8(if n > 0 { total_us / n } else { 0 }),
                ]
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::clients::NewClient;

    fn client(m: &Metrics, id: u64, tenant: u128) -> crate::metrics::clients::ClientEntry {
        m.clients.register(NewClient {
            id,
            user: format!("u{id}"),
            tenant: Uuid::from_u128(tenant),
            application_name: "app".into(),
            client_addr: "127.0.0.1:5".into(),
        })
    }

    #[test]
    fn tenants_see_only_their_own_clients_unless_trusted() {
        let m = Metrics::new(10, false);
        let _a = client(&m, 1, 1);
        let b = client(&m, 2, 2);
        b.info.set_backend(Some(99));
        assert_eq!(rows(&m, Console::Clients, Uuid::from_u128(1)).len(), 1);
        assert!(rows(&m, Console::Servers, Uuid::from_u128(1)).is_empty());
        assert_eq!(rows(&m, Console::Servers, Uuid::from_u128(2)).len(), 1);
        let trusted = Metrics::new(10, true);
        let _c = client(&trusted, 1, 1);
        let _d = client(&trusted, 2, 2);
        assert_eq!(
            rows(&trusted, Console::Clients, Uuid::from_u128(1)).len(),
            2
        );
    }

    #[test]
    fn stats_have_a_row_per_kind() {
        let m = Metrics::new(10, true);
        m.statement(Kind::Ack, std::time::Duration::from_micros(300), true);
        let stats = rows(&m, Console::Stats, Uuid::nil());
        assert_eq!(stats.len(), Kind::ALL.len());
        let ack = stats
            .iter()
            .find(|r| r[0] == Cell::Text("ack".into()))
            .unwrap();
        assert_eq!(ack[1], Cell::Int8(1));
        assert_eq!(ack[3], Cell::Int8(300));
    }
}
