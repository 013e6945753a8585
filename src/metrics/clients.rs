//! The live client sessions, as `SHOW QUEENWIRE CLIENTS` and `SERVERS`
//! list them. A session registers once at its start (an entry that
//! removes itself when dropped) and keeps its state in atomics.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;
use uuid::Uuid;

/// What a session is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum State {
    /// Waiting for the client, outside a transaction.
    Idle = 0,
    /// Working on a client message.
    Active = 1,
    /// Waiting for the client inside a transaction block.
    IdleInTransaction = 2,
    /// Waiting for the client inside a failed transaction block.
    IdleInFailedTransaction = 3,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Idle => "idle",
            State::Active => "active",
            State::IdleInTransaction => "idle in transaction",
            State::IdleInFailedTransaction => "idle in transaction (aborted)",
        }
    }

    fn from_u8(v: u8) -> State {
        match v {
            1 => State::Active,
            2 => State::IdleInTransaction,
            3 => State::IdleInFailedTransaction,
            _ => State::Idle,
        }
    }
}

/// One session.
pub struct ClientInfo {
    pub id: u64,
    pub user: String,
    pub tenant: Uuid,
    pub application_name: String,
    pub client_addr: String,
    pub since: SystemTime,
    state: AtomicU8,
    pinned: AtomicBool,
    /// PID of the backend connection held now; 0: none.
    backend_pid: AtomicI32,
}

impl ClientInfo {
    pub fn set_state(&self, state: State) {
        self.state.store(state as u8, Ordering::Relaxed);
    }

    pub fn state(&self) -> State {
        State::from_u8(self.state.load(Ordering::Relaxed))
    }

    pub fn set_pinned(&self, pinned: bool) {
        self.pinned.store(pinned, Ordering::Relaxed);
    }

    pub fn pinned(&self) -> bool {
        self.pinned.load(Ordering::Relaxed)
    }

    pub fn set_backend(&self, pid: Option<i32>) {
        self.backend_pid.store(pid.unwrap_or(0), Ordering::Relaxed);
    }

    pub fn backend_pid(&self) -> Option<i32> {
        Some(self.backend_pid.load(Ordering::Relaxed)).filter(|&p| p != 0)
    }
}

/// What a session tells at its start.
pub struct NewClient {
    pub id: u64,
    pub user: String,
    pub tenant: Uuid,
    pub application_name: String,
    pub client_addr: String,
}

#[derive(Default)]
pub struct Clients {
    live: Arc<Mutex<BTreeMap<u64, Arc<ClientInfo>>>>,
}

/// A session's registration: removed from the list when dropped.
pub struct ClientEntry {
    pub info: Arc<ClientInfo>,
    /// Errors the backend sent this session's client (the session's own
    /// count, to tell whether a passthrough statement failed).
    pub backend_errors: u64,
    /// Passthrough Executes of the extended protocol since the last Sync:
    /// the pipeline's round trip is timed at its Sync.
    pub passthrough_executes: u64,
    live: Arc<Mutex<BTreeMap<u64, Arc<ClientInfo>>>>,
}

impl Drop for ClientEntry {
    fn drop(&mut self) {
        if let Ok(mut live) = self.live.lock() {
            live.remove(&self.info.id);
        }
    }
}

impl Clients {
    pub fn register(&self, c: NewClient) -> ClientEntry {
        let info = Arc::new(ClientInfo {
            id: c.id,
            user: c.user,
            tenant: c.tenant,
            application_name: c.application_name,
            client_addr: c.client_addr,
            since: SystemTime::now(),
            state: AtomicU8::new(State::Idle as u8),
            pinned: AtomicBool::new(false),
            backend_pid: AtomicI32::new(0),
        });
        if let Ok(mut live) = self.live.lock() {
            live.insert(c.id, info.clone());
        }
        ClientEntry {
            info,
            backend_errors: 0,
            passthrough_executes: 0,
            live: self.live.clone(),
        }
    }

    /// The live sessions, by id.
    pub fn list(&self) -> Vec<Arc<ClientInfo>> {
        match self.live.lock() {
            Ok(live) => live.values().cloned().collect(),
            Err(p) => p.into_inner().values().cloned().collect(),
        }
    }

    pub fn count(&self) -> usize {
        match self.live.lock() {
            Ok(live) => live.len(),
            Err(p) => p.into_inner().len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_leaves_the_list_when_dropped() {
        let clients = Clients::default();
        let new = |id| NewClient {
            id,
            user: "u".into(),
            tenant: Uuid::nil(),
            application_name: String::new(),
            client_addr: "127.0.0.1:1".into(),
        };
        let a = clients.register(new(1));
        let b = clients.register(new(2));
        a.info.set_state(State::Active);
        b.info.set_backend(Some(77));
        assert_eq!(clients.count(), 2);
        assert_eq!(clients.list()[0].state(), State::Active);
        assert_eq!(clients.list()[1].backend_pid(), Some(77));
        drop(a);
        assert_eq!(clients.count(), 1);
        assert_eq!(clients.list()[0].id, 2);
    }
}
