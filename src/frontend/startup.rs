//! The startup phase: SSL/GSS negotiation refusals, cancel requests,
//! protocol version, authentication, parameter statuses.

use super::client::{Client, ClientStream};
use super::{scram, Shared};
use crate::protocol::tags::{auth, frontend as tag, startup as code};
use crate::protocol::SqlState;
use crate::protocol::{self, read_startup_packet, BodyReader, SqlError};
use crate::users::{Passthrough, Users};
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::io::AsyncWriteExt;

/// Startup packets are small; PostgreSQL itself caps them at 10,000 bytes.
const MAX_STARTUP_PACKET: usize = 10_000;

/// Startup parameters that are not session settings.
const NOT_SETTINGS: &[&str] = &["user", "database", "replication"];

/// What the client asked for in its startup packet.
struct Startup {
    user: String,
    settings: BTreeMap<String, String>,
    unsupported_options: Vec<String>,
    minor: i32,
    /// A walsender was asked for (`replication=true` or `database`).
    replication: bool,
}

/// A client that completed startup and authentication.
pub struct Started {
    pub client: Client,
    pub identity: Identity,
    /// Session parameters from the startup packet, as SQL value text.
    pub settings: BTreeMap<String, String>,
    pub user: String,
}

/// Runs the startup phase. `None` when the connection ends here (a cancel
/// request, a refused login, a vanished client).
pub async fn startup(shared: &Arc<Shared>, stream: ClientStream) -> Option<Started> {
    negotiate(shared, stream, None).await
}

/// A client that may not have a session (too many clients, a remote
/// client with no users file): its SSL or GSS request is answered and its
/// startup packet read, then `refusal` is sent, as PostgreSQL refuses it.
/// Sent before the startup packet, a driver reads it as a failed SSL
/// negotiation and shows no SQLSTATE. A cancel request is still carried
/// out: it is how a client stops a query when the server is full.
pub async fn refuse(shared: &Arc<Shared>, stream: ClientStream, refusal: SqlError) {
    negotiate(shared, stream, Some(refusal)).await;
}

async fn negotiate(
    shared: &Arc<Shared>,
    mut stream: ClientStream,
    refusal: Option<SqlError>,
) -> Option<Started> {
    let startup = loop {
        let packet = match read_startup_packet(&mut stream, MAX_STARTUP_PACKET).await {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!("startup: {e}");
                return None;
            }
        };
        let mut r = BodyReader::from_slice(&packet);
        let Ok(code) = r.i32() else { return None };
        match code {
            code::SSL_REQUEST => match (shared.tls(), stream) {
                (Some(acceptor), ClientStream::Plain(mut tcp)) => {
                    tcp.write_all(code::ACCEPT).await.ok()?;
                    match acceptor.accept(tcp).await {
                        Ok(tls) => stream = ClientStream::Tls(Box::new(tls)),
                        Err(e) => {
                            tracing::debug!("TLS handshake failed: {e}");
                            return None;
                        }
                    }
                }
                // No TLS configured, a second request or a Unix socket:
                // decline; the client goes on in plaintext or gives up.
                (_, mut other) => {
                    other.write_all(code::DECLINE).await.ok()?;
                    stream = other;
                }
            },
            code::GSSENC_REQUEST => stream.write_all(code::DECLINE).await.ok()?,
            code::CANCEL_REQUEST => {
                if let (Ok(pid), Ok(secret)) = (r.i32(), r.i32()) {
                    shared.registry.cancel(pid, secret, &shared.target).await;
                }
                return None;
            }
            // A Unix socket never crosses a network (PostgreSQL's hostssl
            // lines do not apply to it either).
            code if code >> 16 == 3
                && shared.config.require_tls
                && !stream.is_tls()
                && !stream.is_unix() =>
            {
                let err = SqlError::fatal(
                    SqlState::INVALID_AUTHORIZATION_SPECIFICATION,
                    "queenwire requires TLS: connect with sslmode=require",
                );
                refuse_with(&mut stream, err).await;
                return None;
            }
            code if code >> 16 == 3 && refusal.is_some() => {
                if let Some(err) = refusal {
                    refuse_with(&mut stream, err).await;
                }
                return None;
            }
            code if code >> 16 == 3 => match read_parameters(&mut r, code & 0xffff) {
                Ok(s) => break s,
                Err(msg) => {
                    refuse_with(
                        &mut stream,
                        SqlError::fatal(SqlState::PROTOCOL_VIOLATION, msg),
                    )
                    .await;
                    return None;
                }
            },
            other => {
                let msg = format!(
                    "unsupported frontend protocol {}.{}: server supports 3.0",
                    other >> 16,
                    other & 0xffff
                );
                refuse_with(
                    &mut stream,
                    SqlError::fatal(SqlState::FEATURE_NOT_SUPPORTED, msg),
                )
                .await;
                return None;
            }
        }
    };

    if startup.replication {
        let mut err = SqlError::fatal(
            SqlState::FEATURE_NOT_SUPPORTED,
            "queenwire does not serve replication connections",
        );
        err.hint = Some(
            "connect pg_basebackup, pg_receivewal and logical replication clients to PostgreSQL itself".into(),
        );
        refuse_with(&mut stream, err).await;
        return None;
    }
    let mut client = Client::new(stream);
    if startup.minor > 0 || !startup.unsupported_options.is_empty() {
        client.send(&protocol::negotiate_protocol_version(
            code::PROTOCOL_3,
            &startup.unsupported_options,
        ));
    }

    let identity = match shared.users() {
        Some(users) => match authenticate(shared, &users, &mut client, &startup.user).await {
            Some(identity) => identity,
            None => {
                // As PostgreSQL logs a failed login: who, from where.
                let peer = client.peer().map(|p| p.to_string()).unwrap_or_default();
                tracing::warn!(user = %startup.user, %peer, "password authentication failed");
                let err = SqlError::fatal(
                    SqlState::INVALID_PASSWORD,
                    format!(
                        "password authentication failed for user \"{}\"",
                        startup.user
                    ),
                );
                client.send_fatal(&err).await;
                return None;
            }
        },
        // No users file: loopback clients only (checked at accept), trusted,
        // in the default tenant.
        None => Identity {
            tenant: crate::engine::DEFAULT_TENANT,
            passthrough: Passthrough::Full,
            admin: true,
        },
    };
    client.send(&protocol::authentication(auth::OK, &[]));
    tracing::debug!(user = %startup.user, "client authenticated");
    Some(Started {
        client,
        identity,
        settings: startup.settings,
        user: startup.user,
    })
}

fn read_parameters(r: &mut BodyReader<'_>, minor: i32) -> Result<Startup, String> {
    let mut user = None;
    let mut settings = BTreeMap::new();
    let mut unsupported_options = Vec::new();
    let mut replication = false;
    loop {
        let name = r.cstr().map_err(|e| e.to_string())?;
        if name.is_empty() {
            break;
        }
        let value = r.cstr().map_err(|e| e.to_string())?;
        if name == "user" {
            user = Some(value.to_string());
        } else if name == "replication"
            && !matches!(
                value.to_ascii_lowercase().as_str(),
                "false" | "off" | "no" | "0"
            )
        {
            replication = true;
        } else if name == "options" {
            for (k, v) in command_line_options(value)? {
                settings.insert(k, v);
            }
        } else if name.starts_with("_pq_.") {
            unsupported_options.push(name.to_string());
        } else if !NOT_SETTINGS.contains(&name) {
            if !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
            {
                return Err(format!("invalid startup parameter name \"{name}\""));
            }
            settings.insert(name.to_string(), value.to_string());
        }
    }
    let user = user.ok_or("no PostgreSQL user name specified in startup packet")?;
    Ok(Startup {
        user,
        settings,
        unsupported_options,
        minor,
        replication,
    })
}

/// The `-c name=value` and `--name=value` settings of the `options`
/// startup parameter (libpq's PGOPTIONS): words split on unescaped spaces,
/// `\` escaping the next character.
fn command_line_options(options: &str) -> Result<Vec<(String, String)>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut chars = options.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(next) = chars.next() {
                    word.push(next);
                }
            }
            c if c.is_whitespace() => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            c => word.push(c),
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    let mut settings = Vec::new();
    let mut words = words.into_iter();
    while let Some(w) = words.next() {
        let setting = if w == "-c" {
            words.next().ok_or("-c without a setting in options")?
        } else if let Some(rest) = w.strip_prefix("-c").or_else(|| w.strip_prefix("--")) {
            rest.to_string()
        } else {
            return Err(format!("unsupported command-line option \"{w}\" in options: only -c name=value is accepted"));
        };
        let (name, value) = setting.split_once('=').ok_or_else(|| {
            format!("invalid setting \"{setting}\" in options: expected name=value")
        })?;
        let name = name.replace('-', "_");
        if !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
            || name.is_empty()
        {
            return Err(format!("invalid setting name \"{name}\" in options"));
        }
        settings.push((name, value.to_string()));
    }
    Ok(settings)
}

async fn refuse_with(stream: &mut ClientStream, err: SqlError) {
    super::errors::send_fatal(stream, &err).await;
}

/// Who a session acts for.
#[derive(Debug, Clone, Copy)]
pub struct Identity {
    pub tenant: uuid::Uuid,
    pub passthrough: Passthrough,
    /// May run `PURGE TENANT`: `admin = true` in the users file, or the
    /// trusted loopback user when there is no users file.
    pub admin: bool,
}

/// SCRAM-SHA-256 against the users file. `None` for any failure: the
/// client learns nothing but 28P01, whether or not the user exists.
async fn authenticate(
    shared: &Arc<Shared>,
    users: &Users,
    client: &mut Client,
    user: &str,
) -> Option<Identity> {
    let known = users.users.get(user);
    let mut mechanisms = Vec::new();
    mechanisms.extend_from_slice(scram::MECHANISM.as_bytes());
    mechanisms.extend_from_slice(&[0, 0]);
    client.send(&protocol::authentication(auth::SASL, &mechanisms));
    client.flush().await.ok()?;

    let msg = client.read(MAX_STARTUP_PACKET).await.ok()?;
    if msg.tag != tag::PASSWORD {
        return None;
    }
    let mut r = msg.reader();
    if r.cstr().ok()? != scram::MECHANISM {
        return None;
    }
    let len = r.i32().ok()?;
    let first = std::str::from_utf8(r.bytes(usize::try_from(len).ok()?).ok()?).ok()?;
    let decoy = scram::decoy_verifier(user, &shared.config.decoy_secret);
    let (exchange, server_first) =
        scram::Exchange::start(known.map(|u| u.verifier.clone()), decoy, first).ok()?;
    client.send(&protocol::authentication(
        auth::SASL_CONTINUE,
        server_first.as_bytes(),
    ));
    client.flush().await.ok()?;

    let msg = client.read(MAX_STARTUP_PACKET).await.ok()?;
    if msg.tag != tag::PASSWORD {
        return None;
    }
    let client_final = std::str::from_utf8(&msg.body).ok()?;
    let server_final = exchange.finish(client_final).ok()?;
    client.send(&protocol::authentication(
        auth::SASL_FINAL,
        server_final.as_bytes(),
    ));
    let u = known?;
    Some(Identity {
        tenant: u.tenant,
        passthrough: u.passthrough,
        admin: users.admins.contains(&u.name),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_carry_settings_like_libpq() {
        assert_eq!(
            command_line_options(
                "-c search_path=queen,public --statement-timeout=5s -cwork_mem=64MB"
            )
            .unwrap(),
            vec![
                ("search_path".to_string(), "queen,public".to_string()),
                ("statement_timeout".to_string(), "5s".to_string()),
                ("work_mem".to_string(), "64MB".to_string()),
            ]
        );
        assert_eq!(
            command_line_options("-c application_name=a\\ b").unwrap(),
            vec![("application_name".to_string(), "a b".to_string())]
        );
        assert!(command_line_options("-d 5").is_err());
        assert!(command_line_options("-c nonsense").is_err());
    }
}
