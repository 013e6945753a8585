//! Talking to PostgreSQL: raw message connections (`conn`), opening them
//! (`connect`, `auth`), the proxy's own typed calls on them (`call`) and
//! their pool (`pool`). Owns the bytes exchanged with PostgreSQL; knows
//! nothing of clients, sessions or queues.

mod auth;
pub mod call;
pub mod conn;
mod connect;
pub mod health;
pub mod pool;
pub mod target;

pub use conn::{BackendConn, BackendError, BackendKey};
pub use pool::{Pool, PooledConn};
pub use target::{BackendAddress, BackendTarget};
