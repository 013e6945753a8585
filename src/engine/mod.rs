//! Queue semantics, executed against PostgreSQL. Owns: the entry of every
//! dialect statement (`execute.rs`: one arm a statement, each deciding its
//! fusion, its ephemeral forwarding and its waiting; the lock order of
//! seed 000; failing refused statements in the backend), POP's waiting
//! (`wait.rs`), push fusion, segment framing, receipts, long-poll wake-ups,
//! KV, timers, the elected maintenance loops and the boot-time schema apply.
//! Each statement runs as the typed calls of `crate::calls`, built from it
//! by `rewrite::build`; the engine builds no SQL text and reads rows by
//! column name.
//!
//! Knows nothing of the client's wire or the session's bookkeeping: a
//! session lends it a backend connection through [`Lender`]. Only the
//! fused writers (`fusion/`), which write for many sessions at once, take
//! connections of their own from the pool.

pub mod acks;
pub mod browse;
mod console;
pub mod ephemeral;
mod execute;
pub mod frame;
pub mod fusion;
pub mod groups;
pub mod hotlist;
pub mod kv;
pub mod leases;
pub mod lend;
pub mod lock_order;
pub mod maintenance;
mod observe;
pub mod pop;
pub mod purge;
pub mod queues;
pub mod receipt;
pub mod replay;
pub mod retention;
pub mod schema;
pub mod sealing;
pub mod status;
pub mod streams;
pub mod timers;
pub mod values;
mod wait;
pub mod wake;
pub mod wildcard;

pub use execute::StatementError;
pub use lend::{CallEnd, Lender, TxnView};

use crate::backend::call::Calls;
use crate::backend::BackendError;
use crate::protocol::{SqlError, SqlState};
use queues::Limits;
use receipt::ReceiptKey;
use std::sync::Arc;
use uuid::Uuid;
use values::Cell;

/// The default tenant of a proxy user until users carry their own.
pub const DEFAULT_TENANT: Uuid = Uuid::from_u128(1);

/// Raises an error in the backend with the given SQLSTATE and message: the
/// backend's current transaction then fails exactly as for an error of its
/// own (`queen.raise_v1`).
pub use crate::calls::transaction::RAISE as RAISE_CALL;

/// Why a statement failed, inside the engine.
#[derive(Debug)]
pub enum ExecError {
    /// Found by the proxy before or instead of a backend call: the backend
    /// has not failed the statement. Never leaves the engine:
    /// [`Engine::execute`] fails the statement in the backend first and
    /// reports it as [`StatementError::Failed`].
    Refused(SqlError),
    /// The backend failed the statement (ErrorResponse): it now skips to
    /// the next Sync.
    Failed(SqlError),
    /// The backend connection broke.
    Lost(BackendError),
}

impl std::fmt::Display for ExecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExecError::Refused(e) | ExecError::Failed(e) => {
                write!(f, "{} ({})", e.message, e.code())
            }
            ExecError::Lost(e) => write!(f, "{e}"),
        }
    }
}

impl From<SqlError> for ExecError {
    fn from(e: SqlError) -> Self {
        ExecError::Refused(e)
    }
}

impl From<BackendError> for ExecError {
    fn from(e: BackendError) -> Self {
        match e {
            BackendError::Server(fields) => ExecError::Failed(fields),
            // The backend is in step: the statement alone fails (in the
            // backend too, as a refusal is), the session goes on.
            BackendError::Decode(e) => ExecError::Refused(SqlError::error(
                SqlState::INTERNAL_ERROR,
                format!("queenwire could not read the backend's reply: {e}"),
            )),
            other => ExecError::Lost(other),
        }
    }
}

/// What a statement produced.
pub struct Outcome {
    pub rows: Vec<Vec<Cell>>,
    pub tag: String,
    /// A queue this statement pushed to: its waiters are woken once the
    /// transaction ends.
    pub pushed: Option<String>,
    /// An ephemeral PUSH inside a transaction block: the token its
    /// messages wait under, applied once the block is found committed
    /// (`ephemeral/`).
    pub ephemeral_commit: Option<Uuid>,
}

/// What every session's statements share.
pub struct Engine {
    pub kv: Arc<kv::KvState>,
    pub receipts: ReceiptKey,
    pub fuser: Arc<fusion::Fuser>,
    pub limits: Limits,
    pub announcer: wake::Announcer,
    /// Begins when the server drains: a POP … WAIT stops waiting.
    pub draining: crate::shutdown::ShutdownSignal,
    /// Counters and latencies of the statements run here.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// The ephemeral queues: their names, the ones this process owns.
    pub ephemeral: Arc<ephemeral::Ephemeral>,
    /// The encryption keys and which queues need them.
    pub sealing: Arc<sealing::Sealing>,
    /// Where stream expressions are evaluated (the tenant's own role).
    pub streams: Arc<streams::Evaluators>,
}

impl Engine {
    /// CREATE / ALTER QUEUE: through `ephemeral_configure_v1` when an
    /// option of the ephemeral class is named (the names are then re-read,
    /// so this process knows the class at once), else `configure_queue_v1`.
    async fn configure(
        &self,
        conn: &mut Calls<'_>,
        call: &crate::calls::admin::Configure,
        settings: &[crate::rewrite::dialect::QueueSetting],
    ) -> Result<(), ExecError> {
        if settings.iter().any(|s| s.option.is_ephemeral()) {
            conn.run(&crate::calls::ephemeral::EphemeralConfigure(call))
                .await?;
            self.ephemeral.refresh().await;
        } else {
            conn.run(call).await?;
        }
        Ok(())
    }
}

pub type SharedEngine = Arc<Engine>;
