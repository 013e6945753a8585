//! Embedded PostgreSQL launcher (placeholder until it lands).
