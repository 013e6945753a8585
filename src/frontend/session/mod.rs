//! One client session after startup, one concern a file:
//!
//! - `dispatch` — the `Session` struct, its greeting and the message loop;
//! - `replies` — what the backend and the proxy still owe the client, in
//!   order (no I/O; one unit test per flow);
//! - `lease` — the backend connection: which pool, when held, pinning;
//! - `relay` — forwarding to the backend and relaying its replies;
//! - `idle` — waiting for the client, relaying what the backend sends unasked;
//! - `gone` — a client that leaves while its statement runs;
//! - `settings` — startup settings as the session's defaults after RESET;
//! - `simple`, `extended`, `copy` — the simple and extended query
//!   protocols and COPY FROM STDIN;
//! - `prepared`, `portals` — the client's statements and portals;
//! - `block` — LISTEN / UNLISTEN inside a transaction block, at its COMMIT;
//! - `dialect` — running a dialect statement through the engine, which
//!   borrows the session's connection through `engine::Lender`;
//! - `rows`, `canned` — result rows on the wire and the proxy's own answers.

mod block;
mod canned;
mod copy;
mod dialect;
mod dispatch;
mod extended;
mod gone;
mod idle;
mod lease;
mod portals;
mod prepared;
mod relay;
mod replies;
mod rows;
mod settings;
mod simple;

pub use dispatch::{End, Session};
