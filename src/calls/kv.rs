//! The KV statements: each one call of `queen.kv_apply_v1`, which takes a
//! JSON array of operations and applies them at one instant. `rewrite::build::kv`
//! builds that array from the statement; every rule of the store (existence,
//! versions, preconditions) lives in the procedure.

use super::declare::calls;
use super::{Call, CallSpec, DecodeError, FromRow, Jsonb, Row};
use std::time::SystemTime;
use tokio_postgres::types::ToSql;
use uuid::Uuid;

calls! {
    pub const APPLY = "qw_kv_apply_v1" {
        SELECT * FROM queen.kv_apply_v1;
        args(ops: TEXT::jsonb, tenant: UUID);
        row KvRow {
            op_index: INT4,
            namespace: TEXT,
            key: TEXT,
            applied: BOOL,
            value: JSONB,
            version: INT8,
            expires_at: TIMESTAMPTZ,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct KvApply {
    /// The JSON array of operations.
    pub ops: String,
    /// The bytes the batch may write (for the soft quota).
    pub write_bytes: i64,
    pub tenant: Uuid,
}

impl Call for KvApply {
    const SPEC: &'static CallSpec = &APPLY;
    type Row = KvRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![&self.ops, &self.tenant]
    }
}

/// One operation's outcome; which fields mean something depends on the
/// operation.
#[derive(Debug, Clone, PartialEq)]
pub struct KvRow {
    pub namespace: Option<String>,
    pub key: Option<String>,
    pub applied: Option<bool>,
    pub value: Option<Jsonb>,
    pub version: Option<i64>,
    pub expires_at: Option<SystemTime>,
}

impl FromRow for KvRow {
    fn from_row(row: &Row<'_>) -> Result<Self, DecodeError> {
        Ok(KvRow {
            namespace: row.get("namespace")?,
            key: row.get("key")?,
            applied: row.get("applied")?,
            value: row.get("value")?,
            version: row.get("version")?,
            expires_at: row.get("expires_at")?,
        })
    }
}
