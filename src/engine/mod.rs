//! Executes commands against PostgreSQL: the boot-time schema apply, the
//! embedded cluster. Knows nothing of the wire.

pub mod embedded;
pub mod schema;
