//! The users file: who may log in, with which SCRAM-SHA-256 verifier, in
//! which tenant, under which passthrough policy. It stores verifiers, never
//! passwords.
//!
//! ```toml
//! [users.alice]
//! tenant = "0f5c…"
//! passthrough = "read_only"          # none | read_only | full
//! scram = "SCRAM-SHA-256$4096:<salt>$<StoredKey>:<ServerKey>"
//! ```
//! The verifier has PostgreSQL's own format (`pg_authid.rolpassword`).

use crate::crypto::{hmac, salted_password, sha256};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use std::collections::BTreeMap;
use std::path::Path;
use uuid::Uuid;

pub const SCRAM_ITERATIONS: u32 = 4096;

/// What plain SQL a user may pass through to PostgreSQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Passthrough {
    None,
    ReadOnly,
    Full,
}

impl Passthrough {
    pub fn parse(s: &str) -> Option<Passthrough> {
        match s {
            "none" => Some(Passthrough::None),
            "read_only" => Some(Passthrough::ReadOnly),
            "full" => Some(Passthrough::Full),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Passthrough::None => "none",
            Passthrough::ReadOnly => "read_only",
            Passthrough::Full => "full",
        }
    }
}

/// A SCRAM-SHA-256 verifier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verifier {
    pub iterations: u32,
    pub salt: Vec<u8>,
    pub stored_key: [u8; 32],
    pub server_key: [u8; 32],
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub tenant: Uuid,
    pub passthrough: Passthrough,
    pub verifier: Verifier,
}

impl User {
    /// The PostgreSQL role this user's plain SQL runs as, as
    /// `queen.tenant_role_ensure_v1` names it; `None` for passthrough
    /// `none` (no plain SQL at all).
    pub fn backend_role(&self) -> Option<String> {
        let hex = self.tenant.simple();
        match self.passthrough {
            Passthrough::None => None,
            Passthrough::ReadOnly => Some(format!("queen_t_{hex}_ro")),
            Passthrough::Full => Some(format!("queen_t_{hex}")),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum UsersError {
    #[error("users file {0}: {1}")]
    Io(String, std::io::Error),
    #[error("users file {0}: {1}")]
    Parse(String, String),
    #[error("{0}")]
    Invalid(String),
}

impl Verifier {
    /// A new verifier for `password` with a random salt. The password is
    /// used as given (SASLprep of non-ASCII passwords is not applied).
    pub fn new(password: &str) -> Verifier {
        let salt: Vec<u8> = (0..16).map(|_| rand::random::<u8>()).collect();
        Verifier::with_salt(password, salt, SCRAM_ITERATIONS)
    }

    pub fn with_salt(password: &str, salt: Vec<u8>, iterations: u32) -> Verifier {
        let salted = salted_password(password.as_bytes(), &salt, iterations);
        let client_key = hmac(&salted, b"Client Key");
        Verifier {
            iterations,
            salt,
            stored_key: sha256(&client_key),
            server_key: hmac(&salted, b"Server Key"),
        }
    }

    pub fn encode(&self) -> String {
        format!(
            "SCRAM-SHA-256${}:{}${}:{}",
            self.iterations,
            B64.encode(&self.salt),
            B64.encode(self.stored_key),
            B64.encode(self.server_key)
        )
    }

    pub fn decode(s: &str) -> Option<Verifier> {
        let rest = s.strip_prefix("SCRAM-SHA-256$")?;
        let (params, keys) = rest.split_once('$')?;
        let (iterations, salt) = params.split_once(':')?;
        let (stored, server) = keys.split_once(':')?;
        let key32 = |k: &str| -> Option<[u8; 32]> { B64.decode(k).ok()?.try_into().ok() };
        Some(Verifier {
            iterations: iterations.parse().ok().filter(|i| *i > 0)?,
            salt: B64.decode(salt).ok()?,
            stored_key: key32(stored)?,
            server_key: key32(server)?,
        })
    }
}

/// The users of a users file, by name.
#[derive(Debug, Clone, Default)]
pub struct Users {
    pub users: BTreeMap<String, User>,
    /// Users whose entry says `admin = true`: they may run `PURGE TENANT`
    /// (docs/security.md). Kept apart from [`User`] so an entry without the
    /// key reads as before.
    pub admins: std::collections::BTreeSet<String>,
}

impl Users {
    pub fn load(path: &Path) -> Result<Users, UsersError> {
        let shown = path.display().to_string();
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Users::default()),
            Err(e) => return Err(UsersError::Io(shown, e)),
        };
        Users::parse(&text).map_err(|e| UsersError::Parse(shown, e))
    }

    pub fn parse(text: &str) -> Result<Users, String> {
        let table: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| one_line(text, &e))?;
        let mut users = BTreeMap::new();
        let mut admins = std::collections::BTreeSet::new();
        let Some(section) = table.get("users") else {
            return Ok(Users {
                users,
                admins: Default::default(),
            });
        };
        let section = section.as_table().ok_or("[users] must be a table")?;
        for (name, entry) in section {
            let entry = entry
                .as_table()
                .ok_or_else(|| format!("users.{name} must be a table"))?;
            let field = |key: &str| -> Result<&str, String> {
                entry
                    .get(key)
                    .and_then(|v| v.as_str())
                    .ok_or_else(|| format!("users.{name}.{key} is missing or not a string"))
            };
            let tenant = Uuid::parse_str(field("tenant")?)
                .map_err(|e| format!("users.{name}.tenant: {e}"))?;
            let passthrough = Passthrough::parse(field("passthrough")?).ok_or_else(|| {
                format!("users.{name}.passthrough must be none, read_only or full")
            })?;
            match entry.get("admin") {
                None | Some(toml::Value::Boolean(false)) => {}
                Some(toml::Value::Boolean(true)) => {
                    admins.insert(name.clone());
                }
                Some(_) => return Err(format!("users.{name}.admin must be true or false")),
            }
            let verifier = Verifier::decode(field("scram")?)
                .ok_or_else(|| format!("users.{name}.scram is not a SCRAM-SHA-256 verifier"))?;
            users.insert(
                name.clone(),
                User {
                    name: name.clone(),
                    tenant,
                    passthrough,
                    verifier,
                },
            );
        }
        Ok(Users { users, admins })
    }

    pub fn to_toml(&self) -> String {
        let mut out =
            String::from("# queenwire users: SCRAM-SHA-256 verifiers, never passwords.\n");
        for u in self.users.values() {
            out.push_str(&format!(
                "\n[users.{}]\ntenant = \"{}\"\npassthrough = \"{}\"\nscram = \"{}\"\n",
                toml_key(&u.name),
                u.tenant,
                u.passthrough.as_str(),
                u.verifier.encode()
            ));
            if self.admins.contains(&u.name) {
                out.push_str("admin = true\n");
            }
        }
        out
    }

    /// Writes the file atomically, readable by its owner only.
    pub fn save(&self, path: &Path) -> Result<(), UsersError> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let shown = path.display().to_string();
        let tmp = path.with_extension("tmp");
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(|e| UsersError::Io(shown.clone(), e))?;
        f.write_all(self.to_toml().as_bytes())
            .and_then(|_| f.sync_all())
            .map_err(|e| UsersError::Io(shown.clone(), e))?;
        std::fs::rename(&tmp, path).map_err(|e| UsersError::Io(shown, e))
    }
}

fn toml_key(name: &str) -> String {
    if !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        name.to_string()
    } else {
        format!("\"{}\"", name.replace('\\', "\\\\").replace('"', "\\\""))
    }
}

/// A TOML error in one line (a log line per event): where, and what,
/// without the excerpt and caret it draws under the offending line.
fn one_line(text: &str, e: &toml::de::Error) -> String {
    let what = e.message().trim();
    match e.span().and_then(|span| text.get(..span.start)) {
        Some(before) => {
            let line = before.matches('\n').count() + 1;
            let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
            format!("TOML parse error at line {line}, column {column}: {what}")
        }
        None => format!("TOML parse error: {what}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifier_matches_postgresql_and_round_trips() {
        // From PostgreSQL: password "secret", salt "c2FsdHNhbHRzYWx0c2FsdA==", 4096.
        let v = Verifier::with_salt(
            "pencil",
            B64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap(),
            4096,
        );
        // RFC 7677's example: the client proof for these values checks out.
        assert_eq!(
            B64.encode(v.server_key),
            "wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU="
        );
        assert_eq!(Verifier::decode(&v.encode()), Some(v));
        assert_eq!(Verifier::decode("md5abc"), None);
    }

    #[test]
    fn a_toml_error_is_one_line_with_its_place() {
        let err = Users::parse("[users]\n[users.bob\nx = 1\n").unwrap_err();
        assert!(!err.contains('\n'), "{err}");
        assert!(
            err.starts_with("TOML parse error at line 2, column "),
            "{err}"
        );
    }

    #[test]
    fn users_file_round_trips() {
        let mut users = Users::default();
        users.users.insert(
            "al ice".into(),
            User {
                name: "al ice".into(),
                tenant: Uuid::from_u128(7),
                passthrough: Passthrough::ReadOnly,
                verifier: Verifier::new("pw"),
            },
        );
        users.admins.insert("al ice".into());
        let again = Users::parse(&users.to_toml()).unwrap();
        assert_eq!(again.users, users.users);
        assert_eq!(again.admins, users.admins);
        let text = users.to_toml().replace("admin = true", "admin = \"yes\"");
        assert!(Users::parse(&text).is_err());
        assert!(Users::parse("[users.x]\ntenant = \"nope\"").is_err());
    }
}
