// Errors carry every field of a PostgreSQL error (SQLSTATE, message,
// position, …); they travel the cold path, so their size is not worth boxing.
#![allow(clippy::result_large_err)]

//! queenwire: a PostgreSQL wire-protocol proxy that presents Queen's message
//! queues and key/value store as SQL.
//!
//! The path of a statement: [`frontend`] (sessions, protocol) →
//! [`rewrite`] (text → typed command) → [`engine`] (queen.* calls) and
//! [`backend`] (raw connections to PostgreSQL, pooled per transaction).

pub mod backend;
pub mod calls;
pub mod crypto;
pub mod embedded;
pub mod engine;
pub mod frontend;
pub mod json;
pub mod metrics;
pub mod protocol;
pub mod rewrite;
pub mod server;
pub mod shutdown;
pub mod users;
