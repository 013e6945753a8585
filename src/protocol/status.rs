//! The transaction status a ReadyForQuery carries.

/// Where the backend's transaction stands, as ReadyForQuery reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TxStatus {
    /// Not in a transaction block (`I`).
    #[default]
    Idle,
    /// In a transaction block (`T`).
    InBlock,
    /// In a failed transaction block (`E`): statements are refused until it ends.
    Failed,
}

impl TxStatus {
    pub fn from_byte(b: u8) -> TxStatus {
        match b {
            b'T' => TxStatus::InBlock,
            b'E' => TxStatus::Failed,
            _ => TxStatus::Idle,
        }
    }

    /// From a ReadyForQuery body.
    pub fn from_ready_body(body: &[u8]) -> TxStatus {
        body.first()
            .copied()
            .map_or(TxStatus::Idle, TxStatus::from_byte)
    }

    pub fn as_byte(self) -> u8 {
        match self {
            TxStatus::Idle => b'I',
            TxStatus::InBlock => b'T',
            TxStatus::Failed => b'E',
        }
    }

    /// In a block, failed or not: the connection must stay with its session.
    pub fn in_transaction(self) -> bool {
        self != TxStatus::Idle
    }
}

#[cfg(test)]
mod tests {
    use super::TxStatus;

    #[test]
    fn round_trips_through_the_wire_byte() {
        for s in [TxStatus::Idle, TxStatus::InBlock, TxStatus::Failed] {
            assert_eq!(TxStatus::from_byte(s.as_byte()), s);
        }
        assert_eq!(TxStatus::from_ready_body(b""), TxStatus::Idle);
        assert!(TxStatus::Failed.in_transaction());
        assert!(!TxStatus::Idle.in_transaction());
    }
}
