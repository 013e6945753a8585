//! Talking to PostgreSQL: raw message connections and their pool.

mod auth;
pub mod call;
pub mod conn;
pub mod health;
pub mod pool;
mod target;

pub use conn::{BackendConn, BackendError, BackendKey, BackendTarget};
pub use pool::{Pool, PooledConn};
