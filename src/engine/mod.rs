//! Queue semantics, executed against PostgreSQL. Owns: the entry of every
//! dialect statement (`execute.rs`: the fusion decision, the lock order of
//! seed 000, failing refused statements in the backend), the run of each
//! statement but POP (`Engine::run_statement`, here), POP's waiting
//! (`wait.rs`), push fusion, segment framing, receipts, long-poll wake-ups,
//! KV, timers, the elected maintenance loops and the boot-time schema apply.
//! Each statement runs as the typed calls of `crate::calls`, built from it
//! by `rewrite::build`; the engine
//! builds no SQL text and reads rows by column name.
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
use crate::calls::admin::{Configure, ConfigureMode};
use crate::protocol::SqlError;
use crate::protocol::SqlState;
use crate::rewrite::build::admin;
use crate::rewrite::dialect::groups::GroupChange;
use crate::rewrite::dialect::Statement;
use queues::Limits;
use receipt::ReceiptKey;
use std::sync::Arc;
use uuid::Uuid;
use values::{Cell, Params};

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
    /// Runs one dialect statement on `conn`, inside whatever transaction
    /// the connection is in. Only [`Engine::execute`] calls it, for every
    /// statement but POP and the console.
    async fn run_statement(
        &self,
        conn: &mut Calls<'_>,
        stmt: &Statement,
        params: &[Option<String>],
        tenant: Uuid,
    ) -> Result<Outcome, ExecError> {
        let params = Params(params);
        let mut pushed = None;
        let rows = match stmt {
            Statement::Push(push) => {
                let written =
                    queues::push(conn, push, &params, &self.limits, tenant, &self.sealing).await?;
                let queue = wake::queue_key(tenant, &written.queue);
                let rows = written.rows();
                if !rows.is_empty() {
                    pushed = Some(queue);
                }
                rows
            }
            Statement::Ack(ack) => {
                let hot = &self.announcer.waiters.hot;
                let released = |p: &[(i64, &str)], plain: bool| hot.acked(p, plain);
                acks::ack(conn, ack, &params, &self.receipts, tenant, released).await?
            }
            Statement::Renew(renew) => {
                acks::renew(conn, renew, &params, &self.receipts, tenant).await?
            }
            Statement::CreateQueue(c) => {
                let mode = if c.if_not_exists {
                    ConfigureMode::CreateIfNotExists
                } else {
                    ConfigureMode::Create
                };
                let call = admin::configure(&c.queue, &c.settings, mode, &params, tenant)?;
                self.configure(conn, &call, &c.settings).await?;
                Vec::new()
            }
            Statement::AlterQueue(a) => {
                let call =
                    admin::configure(&a.queue, &a.settings, ConfigureMode::Alter, &params, tenant)?;
                self.configure(conn, &call, &a.settings).await?;
                Vec::new()
            }
            Statement::DropQueue(d) => {
                let queue = params.name(&d.queue, "queue")?;
                let existed = queues::drop_queue(conn, &queue, tenant).await?;
                if self.ephemeral.ref_of(tenant, &queue).is_some() {
                    self.ephemeral.refresh().await;
                }
                if !existed && !d.if_exists {
                    return Err(SqlError::error(
                        SqlState::UNDEFINED_OBJECT,
                        format!("queue \"{queue}\" does not exist"),
                    )
                    .into());
                }
                Vec::new()
            }
            Statement::SeekGroup(s) => {
                let call = admin::seek(s, &params, tenant)?;
                conn.run(&call).await?;
                let hot = &self.announcer.waiters.hot;
                hot.repaired(tenant, &call.queue, &call.group);
                Vec::new()
            }
            Statement::AlterGroup(a) => {
                let (queue, group) = match &a.change {
                    GroupChange::Subscribe(from) => {
                        let call = admin::subscribe(&a.queue, &a.group, from, &params, tenant)?;
                        conn.run(&call).await?;
                        (call.queue, call.group)
                    }
                    GroupChange::Ordered(ordered) => {
                        let call =
                            admin::group_set_type(&a.queue, &a.group, ordered, &params, tenant)?;
                        conn.run(&call).await?;
                        (call.queue, call.group)
                    }
                };
                let hot = &self.announcer.waiters.hot;
                hot.repaired(tenant, &queue, &group);
                Vec::new()
            }
            Statement::DropGroup(d) => {
                let call = admin::drop_group(d, &params, tenant)?;
                conn.run(&call).await?;
                let hot = &self.announcer.waiters.hot;
                hot.repaired(tenant, &call.queue, &call.group);
                Vec::new()
            }
            Statement::ShowQueues => {
                let rows = queues::show_queues(conn, tenant).await?;
                ephemeral::show_queues(conn, &self.ephemeral, rows, tenant).await?
            }
            Statement::ShowPartitions { queue } => {
                let queue = params.name(queue, "queue")?;
                queues::show_partitions(conn, &queue, tenant).await?
            }
            Statement::ShowGroups { queue } => {
                let queue = queue
                    .as_ref()
                    .map(|q| params.name(q, "queue"))
                    .transpose()?;
                queues::show_groups(conn, queue.as_deref(), tenant).await?
            }
            Statement::ShowDlq { queue, limit } => {
                let queue = params.name(queue, "queue")?;
                let limit = params.count(limit, "LIMIT")? as i32;
                queues::show_dlq(conn, &queue, limit, tenant, &self.sealing.keys()).await?
            }
            Statement::Kv(statement) => {
                kv::execute(
                    conn,
                    statement,
                    &params,
                    &self.kv,
                    self.limits.max_payload,
                    tenant,
                )
                .await?
            }
            Statement::Schedule(s) => {
                timers::schedule(conn, s, &params, self.limits.max_payload, tenant).await?
            }
            Statement::CancelSchedule(c) => timers::cancel(conn, c, &params, tenant).await?,
            Statement::ShowSchedules { queue } => {
                let queue = queue
                    .as_ref()
                    .map(|q| params.name(q, "queue"))
                    .transpose()?;
                timers::list(conn, queue.as_deref(), tenant).await?
            }
            Statement::Browse(b) => {
                browse::execute(conn, b, &params, tenant, &self.sealing.keys()).await?
            }
            Statement::GroupDetail(g) => groups::execute(conn, g, &params, tenant).await?,
            Statement::ShowStatus => status::show(conn, tenant).await?,
            Statement::ReplayDlq(r) => {
                let (rows, queue) =
                    replay::replay(conn, r, &params, &self.limits, tenant, &self.sealing).await?;
                if !rows.is_empty() {
                    pushed = Some(wake::queue_key(tenant, &queue));
                }
                rows
            }
            // `execute.rs` runs these itself: POP with its waiting, the
            // console without a backend.
            Statement::Pop(_) | Statement::Console(_) => {
                return Err(SqlError::error(
                    SqlState::INTERNAL_ERROR,
                    "POP and the console views take their own path in execute.rs",
                )
                .into())
            }
            // `execute.rs` refused it inside a transaction block: every
            // step here commits on its own.
            Statement::PurgeTenant(p) => {
                let target = crate::rewrite::dialect::purge::parse_tenant(
                    &params.text(&p.tenant, "tenant")?,
                )
                .map_err(crate::rewrite::bind::parse_error)?;
                purge::purge_tenant(conn, target).await?
            }
            // `execute.rs` refused these inside a transaction block.
            Statement::CreateStream(c) => {
                streams::create(conn, c, &params, &self.streams, tenant).await?
            }
            Statement::DropStream { name, if_exists } => {
                let name = params.name(name, "stream")?;
                streams::drop(conn, &name, *if_exists, tenant).await?
            }
            Statement::AlterStream { name, paused } => {
                let name = params.name(name, "stream")?;
                streams::set_paused(conn, &name, *paused, tenant).await?
            }
            Statement::ShowStreams => streams::list(conn, tenant).await?,
            Statement::ShowStream { name } => {
                let name = params.name(name, "stream")?;
                streams::show(conn, &name, tenant).await?
            }
        };
        Ok(Outcome {
            tag: stmt.command_tag(rows.len()),
            rows,
            pushed,
            ephemeral_commit: None,
        })
    }
}

impl Engine {
    /// CREATE / ALTER QUEUE: through `ephemeral_configure_v1` when an
    /// option of the ephemeral class is named (the names are then re-read,
    /// so this process knows the class at once), else `configure_queue_v1`.
    async fn configure(
        &self,
        conn: &mut Calls<'_>,
        call: &Configure,
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
