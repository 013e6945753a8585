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
    /// The session's count of backend errors at the first reset noted: an
    /// error after it ended the exchange's transaction (its RESET rolled
    /// back with it, or refused, as `DISCARD ALL` in a block is).
    errors_at_first: Option<u64>,
}

impl Reset {
    /// A plain statement of the exchange, in order (`errors`: the
    /// session's count of backend errors before it ran).
    pub(super) fn note(&mut self, sql: &str, errors: u64) {
        use crate::rewrite::passthrough::{resets, sets_setting, Resets};
        let reset = resets(sql);
        if reset.is_some() && self.errors_at_first.is_none() {
            self.errors_at_first = Some(errors);
        }
        match reset {
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

    /// Whether startup settings are to be set again, at the end of an
    /// exchange that saw `errors` backend errors in all: not when one came
    /// after the reset, which then did not take effect (an error ends the
    /// exchange's implicit transaction, or fails its block).
    pub(super) fn pending(&self, errors: u64) -> bool {
        (self.all || !self.names.is_empty()) && self.errors_at_first == Some(errors)
    }

    /// Whether startup setting `name` was reset and not set again.
    pub(super) fn covers(&self, name: &str) -> bool {
        let name = name.to_ascii_lowercase();
        !self.set_since.contains(&name) && (self.all || self.names.contains(&name))
    }
}
