//! The client's startup settings as its session's defaults: which of them
//! an exchange reset (and did not set again), so they are set again before
//! its ReadyForQuery, as PostgreSQL's RESET returns to them.

/// Startup settings a client reset (`RESET`, `SET … TO DEFAULT`, `DISCARD
/// ALL`) and has not set again since: PostgreSQL puts them back to their
/// startup values, so queenwire sets those again when the exchange ends.
#[derive(Default)]
pub(super) struct Reset {
    all: bool,
    names: std::collections::HashSet<String>,
    set_since: std::collections::HashSet<String>,
}

impl Reset {
    /// A plain statement of the exchange, in order.
    pub(super) fn note(&mut self, sql: &str) {
        use crate::rewrite::passthrough::{resets, sets_setting, Resets};
        match resets(sql) {
            Some(Resets::All) => {
                self.all = true;
                self.names.clear();
                self.set_since.clear();
            }
            Some(Resets::Setting(name)) => {
                self.set_since.remove(&name);
                self.names.insert(name);
            }
            None => {
                if let Some(name) = sets_setting(sql) {
                    if self.all || self.names.contains(&name) {
                        self.names.remove(&name);
                        self.set_since.insert(name);
                    }
                }
            }
        }
    }

    pub(super) fn pending(&self) -> bool {
        self.all || !self.names.is_empty()
    }

    /// Whether startup setting `name` was reset and not set again.
    pub(super) fn covers(&self, name: &str) -> bool {
        let name = name.to_ascii_lowercase();
        !self.set_since.contains(&name) && (self.all || self.names.contains(&name))
    }
}
