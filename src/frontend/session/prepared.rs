//! The client's prepared statements, as the proxy keeps them: named ones
//! for the session's life (bounded), the unnamed one until replaced or
//! until a simple query destroys it. A plain statement has a proxy-global
//! name on backend connections, so it can be parsed again wherever the
//! session lands; a dialect statement lives in the proxy only.

use super::canned;
use crate::protocol::SqlError;
use crate::protocol::SqlState;
use crate::rewrite::dialect::Statement;
use crate::rewrite::SessionEffect;
use std::collections::HashMap;
use std::sync::Arc;

/// Named prepared statements one session may hold, and their total text:
/// the proxy keeps them for the session's life, in memory all sessions
/// share.
const MAX_SESSION_STATEMENTS: usize = 10_000;
const MAX_SESSION_STATEMENT_BYTES: usize = 64 << 20;

/// A statement prepared by the client.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The text as the proxy reads it (see `frontend::encoding`).
    pub query: Arc<str>,
    /// The client's own bytes, where they differ from `query`'s UTF-8
    /// (a client encoding other than UTF8): what the backend is sent.
    pub raw: Option<Arc<[u8]>>,
    pub param_types: Arc<[u32]>,
    pub effect: SessionEffect,
    /// The proxy-global name it has on backend connections (named
    /// statements only; the unnamed statement stays unnamed).
    pub global: Option<Arc<str>>,
    /// A dialect statement: served by the engine, never parsed on a backend.
    pub dialect: Option<Arc<Statement>>,
}

impl Prepared {
    /// Parameter types as Describe reports them: the client's where it gave
    /// them, else the dialect grammar's, else text.
    pub fn dialect_param_types(&self, stmt: &Statement, count: usize) -> Vec<u32> {
        let described = stmt.param_types();
        (0..count)
            .map(|i| match self.param_types.get(i) {
                Some(&t) if t != 0 => t,
                _ => described
                    .get(i)
                    .copied()
                    .unwrap_or(crate::protocol::oid::TEXT),
            })
            .collect()
    }
}

#[derive(Default)]
pub struct Statements {
    named: HashMap<String, Prepared>,
    /// Bytes of statement text in `named` (bounded per session).
    named_bytes: usize,
    unnamed: Option<Prepared>,
    /// Bumped at every Parse of the unnamed statement: tells whether the
    /// backend's unnamed statement is still this session's.
    unnamed_generation: u64,
}

impl Statements {
    /// Whether a Parse of `name` with `query` may add it.
    pub fn admit(&self, name: &str, query: &str) -> Result<(), SqlError> {
        if name.is_empty() {
            return Ok(());
        }
        if self.named.contains_key(name) {
            return Err(SqlError::error(
                SqlState::DUPLICATE_PSTATEMENT,
                format!("prepared statement \"{name}\" already exists"),
            ));
        }
        if self.named.len() >= MAX_SESSION_STATEMENTS
            || self.named_bytes + query.len() > MAX_SESSION_STATEMENT_BYTES
        {
            return Err(canned::session_limit(
                "prepared statements",
                MAX_SESSION_STATEMENTS,
                MAX_SESSION_STATEMENT_BYTES,
                "of text",
                "close statements no longer needed (Close, or DEALLOCATE)",
            ));
        }
        Ok(())
    }

    /// Stores `prepared` under `name` ("" for the unnamed statement, whose
    /// generation it bumps); returns what was there before.
    pub fn insert(&mut self, name: &str, prepared: Prepared) -> Option<Prepared> {
        if name.is_empty() {
            self.unnamed_generation += 1;
            return self.unnamed.replace(prepared);
        }
        self.named_bytes += prepared.query.len();
        let old = self.named.insert(name.to_string(), prepared);
        if let Some(old) = &old {
            self.named_bytes -= old.query.len();
        }
        old
    }

    /// Puts statement `name` back as it was before a skipped message
    /// changed it (`None`: absent). The unnamed statement gets a new
    /// generation, so a connection that has another is told it again.
    pub fn restore(&mut self, name: &str, previous: Option<Prepared>) {
        match previous {
            Some(prepared) => {
                self.insert(name, prepared);
            }
            None => {
                self.remove(name);
                if name.is_empty() {
                    self.unnamed_generation += 1;
                }
            }
        }
    }

    pub fn get(&self, name: &str) -> Option<&Prepared> {
        if name.is_empty() {
            self.unnamed.as_ref()
        } else {
            self.named.get(name)
        }
    }

    pub fn unnamed_generation(&self) -> u64 {
        self.unnamed_generation
    }

    /// Forgets statement `name`; what it was.
    pub fn remove(&mut self, name: &str) -> Option<Prepared> {
        if name.is_empty() {
            return self.unnamed.take();
        }
        let old = self.named.remove(name);
        if let Some(old) = &old {
            self.named_bytes -= old.query.len();
        }
        old
    }

    /// `body` (an ErrorResponse's) with each backend name of one of the
    /// session's statements (`prefix` and a number) replaced by the
    /// client's name for it, as PostgreSQL would name it talking to the
    /// client directly; `None` when it names none. Fields are C strings,
    /// and so are both names: the fields stay as they were.
    pub fn in_client_names(&self, body: &[u8], prefix: &[u8]) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        let (mut copied, mut from) = (0, 0);
        while let Some(at) = body[from..].windows(prefix.len()).position(|w| w == prefix) {
            let start = from + at;
            let digits = body[start + prefix.len()..]
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .count();
            let end = start + prefix.len() + digits;
            let client = self.named.iter().find(|(_, p)| {
                p.global
                    .as_deref()
                    .is_some_and(|g| g.as_bytes() == &body[start..end])
            });
            if let Some((name, _)) = client {
                out.extend_from_slice(&body[copied..start]);
                out.extend_from_slice(name.as_bytes());
                copied = end;
            }
            from = end;
        }
        if copied == 0 {
            return None;
        }
        out.extend_from_slice(&body[copied..]);
        Some(out)
    }

    /// `DEALLOCATE ALL` / `DISCARD ALL`: every named statement goes.
    pub fn clear_named(&mut self) {
        self.named.clear();
        self.named_bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prepared(global: &str) -> Prepared {
        Prepared {
            query: Arc::from("select $1::int + $2::int"),
            raw: None,
            param_types: Arc::from(Vec::new()),
            effect: SessionEffect::None,
            global: Some(Arc::from(global)),
            dialect: None,
        }
    }

    #[test]
    fn errors_name_the_session_s_statements_as_the_client_does() {
        let mut statements = Statements::default();
        statements.insert("two", prepared("qw_ab_1"));
        statements.insert("S 3", prepared("qw_ab_12"));
        let body =
            b"SERROR\0Mprepared statement \"qw_ab_1\" requires 2, \"qw_ab_12\" and \"qw_ab_7\"\0\0";
        let renamed = statements.in_client_names(body, b"qw_ab_").unwrap();
        assert_eq!(
            renamed,
            b"SERROR\0Mprepared statement \"two\" requires 2, \"S 3\" and \"qw_ab_7\"\0\0"
        );
        // Names of no statement of the session's stay; nothing to rename.
        assert_eq!(
            statements.in_client_names(b"M\"qw_ab_7\"\0\0", b"qw_ab_"),
            None
        );
        assert_eq!(statements.in_client_names(b"Mqw_ab_\0\0", b"qw_ab_"), None);
    }
}
