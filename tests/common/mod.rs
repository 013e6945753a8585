//! The shared test harness: one embedded PostgreSQL per test binary, a fresh
//! database per test, queenwire started in-process on it, and clients.
#![allow(dead_code)]

pub mod binary;
pub mod cluster;
pub mod cut;
pub mod proxy;
pub mod raw;
pub mod sql;
