//! Portals: those bound to dialect statements live in the proxy (bounded
//! per session); for passthrough portals the proxy remembers only the
//! session effect of their statement, applied when they run.

use super::canned;
use crate::engine::values::Cell;
use crate::protocol::SqlError;
use crate::rewrite::dialect::Statement;
use crate::rewrite::SessionEffect;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// Open dialect portals one session may hold (they live in the proxy until
/// Sync ends their transaction, or Close), and their parameters' size.
const MAX_SESSION_PORTALS: usize = 10_000;
const MAX_SESSION_PORTAL_BYTES: usize = 64 << 20;

/// A portal bound to a dialect statement.
#[derive(Debug)]
pub struct LocalPortal {
    pub statement: Arc<Statement>,
    pub params: Vec<Option<String>>,
    pub result_formats: Vec<i16>,
    /// Set once the statement ran (at the first Execute): the rows no
    /// Execute has returned yet.
    pub unreturned: Option<VecDeque<Vec<Cell>>>,
}

impl LocalPortal {
    fn bytes(&self) -> usize {
        self.params.iter().flatten().map(String::len).sum::<usize>() + 64
    }
}

#[derive(Default)]
pub struct Portals {
    local: HashMap<String, LocalPortal>,
    /// Parameter bytes held in `local` (bounded per session).
    local_bytes: usize,
    /// Session effects of the passthrough portals bound on the backend,
    /// with their statement's text where it has one.
    effects: HashMap<String, (SessionEffect, Arc<str>)>,
    /// Passthrough portals the proxy ran itself (a LISTEN the shared
    /// listening connection serves): run once, as PostgreSQL runs a
    /// utility statement's portal.
    ran: std::collections::HashSet<String>,
}

impl Portals {
    /// Binds dialect portal `name`, replacing (and returning) one of that
    /// name.
    pub fn bind_local(
        &mut self,
        name: &str,
        portal: LocalPortal,
    ) -> Result<Option<LocalPortal>, SqlError> {
        let previous = self.remove_local(name);
        if self.local.len() >= MAX_SESSION_PORTALS
            || self.local_bytes + portal.bytes() > MAX_SESSION_PORTAL_BYTES
        {
            return Err(canned::session_limit(
                "open queenwire portals",
                MAX_SESSION_PORTALS,
                MAX_SESSION_PORTAL_BYTES,
                "of parameters",
                "send Sync, or Close portals no longer needed",
            ));
        }
        self.local_bytes += portal.bytes();
        self.local.insert(name.to_string(), portal);
        Ok(previous)
    }

    /// Puts dialect portal `name` back as it was before a skipped message
    /// changed it (`None`: absent).
    pub fn restore_local(&mut self, name: &str, previous: Option<LocalPortal>) {
        self.remove_local(name);
        if let Some(portal) = previous {
            self.local_bytes += portal.bytes();
            self.local.insert(name.to_string(), portal);
        }
    }

    pub fn local(&self, name: &str) -> Option<&LocalPortal> {
        self.local.get(name)
    }

    pub fn local_mut(&mut self, name: &str) -> Option<&mut LocalPortal> {
        self.local.get_mut(name)
    }

    /// Takes dialect portal `name`'s parameters out, for the one run of
    /// its statement (they are not needed after it), and stops counting
    /// their bytes.
    pub fn take_params(&mut self, name: &str) -> Vec<Option<String>> {
        let Some(portal) = self.local.get_mut(name) else {
            return Vec::new();
        };
        let before = portal.bytes();
        let params = std::mem::take(&mut portal.params);
        self.local_bytes -= before - portal.bytes();
        params
    }

    /// Gives dialect portal `name` back the parameters
    /// [`Portals::take_params`] took, when its statement did not run.
    pub fn put_params(&mut self, name: &str, params: Vec<Option<String>>) {
        if let Some(portal) = self.local.get_mut(name) {
            let before = portal.bytes();
            portal.params = params;
            self.local_bytes += portal.bytes() - before;
        }
    }

    /// Forgets dialect portal `name`; what it was.
    pub fn remove_local(&mut self, name: &str) -> Option<LocalPortal> {
        let old = self.local.remove(name);
        if let Some(old) = &old {
            self.local_bytes -= old.bytes();
        }
        old
    }

    /// A passthrough portal of statement `query` was bound on the backend.
    pub fn bind_backend(&mut self, name: &str, effect: SessionEffect, query: Arc<str>) {
        self.ran.remove(name);
        self.effects.insert(name.to_string(), (effect, query));
    }

    /// Passthrough portal `name` runs now, in the proxy; `false` when it
    /// ran already.
    pub fn first_run(&mut self, name: &str) -> bool {
        self.ran.insert(name.to_string())
    }

    pub fn backend_effect(&self, name: &str) -> Option<(SessionEffect, Arc<str>)> {
        self.effects.get(name).cloned()
    }

    pub fn close_backend(&mut self, name: &str) {
        self.ran.remove(name);
        self.effects.remove(name);
    }

    /// The transaction ended: no portal outlives it.
    pub fn transaction_ended(&mut self) {
        self.local.clear();
        self.local_bytes = 0;
        self.effects.clear();
        self.ran.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn portal(params: Vec<Option<String>>) -> LocalPortal {
        let statement = crate::rewrite::dialect::parse("PUSH INTO q VALUES ($1)")
            .and_then(Result::ok)
            .expect("a dialect statement");
        LocalPortal {
            statement: Arc::new(statement),
            params,
            result_formats: Vec::new(),
            unreturned: None,
        }
    }

    #[test]
    fn parameters_taken_for_a_run_leave_the_byte_count_exact() {
        let mut portals = Portals::default();
        let big = "x".repeat(1000);
        portals
            .bind_local("a", portal(vec![Some(big.clone()), None]))
            .unwrap();
        portals
            .bind_local("b", portal(vec![Some("yy".into())]))
            .unwrap();
        assert_eq!(portals.local_bytes, 1000 + 64 + 2 + 64);
        let taken = portals.take_params("a");
        assert_eq!(taken, vec![Some(big), None]);
        assert_eq!(portals.local_bytes, 64 + 2 + 64);
        assert!(portals.local("a").unwrap().params.is_empty());
        // Not run: given back as bound.
        portals.put_params("a", taken);
        assert_eq!(portals.local_bytes, 1000 + 64 + 2 + 64);
        let _ = portals.take_params("a");
        portals.remove_local("a");
        portals.remove_local("b");
        assert_eq!(portals.local_bytes, 0);
        assert!(portals.take_params("gone").is_empty());
    }
}
