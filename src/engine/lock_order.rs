//! The global lock order of seed 000, as it applies to a client's
//! transaction block: KV rows, then timer rows, then queue, partition and
//! consumer rows. A block that took queue locks and then asks for KV or
//! timer locks could deadlock against one that takes them in order, so the
//! statement is refused (25000) before it takes any. Which rows a statement
//! locks is said next to its grammar ([`Statement::locks`]).

use crate::protocol::SqlError;
use crate::protocol::SqlState;
use crate::rewrite::dialect::{Locks, Statement};

/// What the current transaction block has locked so far.
#[derive(Debug, Default, Clone, Copy)]
pub struct LockOrder {
    queue_locks_held: bool,
}

impl LockOrder {
    /// Before `stmt` runs: refuses it when it breaks the order. Outside a
    /// block every statement is a transaction of its own and nothing is
    /// held across statements.
    pub fn check(&mut self, stmt: &Statement, in_block: bool) -> Result<(), SqlError> {
        if !in_block {
            self.queue_locks_held = false;
        }
        if self.queue_locks_held && stmt.locks() == Locks::KvOrTimer {
            let mut err = SqlError::error(
                SqlState::INVALID_TRANSACTION_STATE,
                "KV writes and timer statements must come before queue statements in a transaction block",
            );
            err.hint = Some(
                "queenwire takes locks in one global order (KV, timers, then queues) so that transactions never deadlock; move this statement up"
                    .into(),
            );
            return Err(err);
        }
        Ok(())
    }

    /// After `stmt` ran inside a block.
    pub fn ran(&mut self, stmt: &Statement, in_block: bool) {
        if in_block && stmt.locks() == Locks::Queue {
            self.queue_locks_held = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rewrite::{classify, Command};

    fn stmt(sql: &str) -> Statement {
        match classify(sql) {
            Command::Dialect(s) => (*s).clone(),
            _ => panic!("not a dialect statement: {sql}"),
        }
    }

    #[test]
    fn kv_after_a_queue_statement_in_a_block_is_refused() {
        let mut order = LockOrder::default();
        let push = stmt("PUSH INTO q VALUES ('{}')");
        let put = stmt("KV PUT ns k '1' FOREVER");
        order.check(&put, true).unwrap();
        order.ran(&put, true);
        order.check(&push, true).unwrap();
        order.ran(&push, true);
        assert_eq!(order.check(&put, true).unwrap_err().code(), "25000");
    }

    #[test]
    fn a_new_transaction_starts_with_nothing_held() {
        let mut order = LockOrder::default();
        let push = stmt("PUSH INTO q VALUES ('{}')");
        let put = stmt("KV PUT ns k '1' FOREVER");
        order.ran(&push, true);
        order.check(&put, false).unwrap();
        order.ran(&push, false);
        order.check(&put, true).unwrap();
    }
}
