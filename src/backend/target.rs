//! Where PostgreSQL is: the hosts of `--backend`, tried in order as libpq
//! tries them, and whether only a writable one will do
//! (`target_session_attrs=read-write`), which is how the pool follows a
//! promoted standby.

use super::conn::{BackendError, BackendKey, Stream};
use bytes::BytesMut;
use postgres_protocol::message::frontend as pp;
use std::path::PathBuf;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long PostgreSQL may take to answer a cancel request (close its
/// connection) before the cancel counts as failed.
pub const CANCEL_TAKEN_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);
use tokio::net::{TcpStream, UnixStream};

/// Where and how to reach PostgreSQL.
#[derive(Debug, Clone)]
pub struct BackendTarget {
    /// The hosts, in the order libpq tries them (`host=a,b`,
    /// `postgres://a,b/…`): a new connection goes to the first that
    /// accepts it (and, with `read_write`, is not read-only), so after a
    /// failover the pool follows the promoted standby.
    pub addresses: Vec<BackendAddress>,
    /// `target_session_attrs=read-write`: skip hosts that are read-only
    /// (a hot standby, or `default_transaction_read_only`).
    pub read_write: bool,
    pub user: String,
    pub password: Option<Vec<u8>>,
    pub database: String,
    /// `application_name` in the startup packet (queenwire's own
    /// connections say who they are in pg_stat_activity).
    pub application_name: Option<String>,
}

#[derive(Debug, Clone)]
pub enum BackendAddress {
    Tcp(String, u16),
    /// Full path of the socket file (`<dir>/.s.PGSQL.<port>`).
    Unix(PathBuf),
}

impl std::fmt::Display for BackendAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BackendAddress::Tcp(host, port) => write!(f, "{host}:{port}"),
            BackendAddress::Unix(path) => write!(f, "{}", path.display()),
        }
    }
}

impl BackendTarget {
    /// Reads the hosts of a tokio-postgres configuration (URL or key=value
    /// form, already parsed), as libpq does: one port for every host, or
    /// one per host.
    pub fn from_config(config: &tokio_postgres::Config) -> Result<BackendTarget, BackendError> {
        let ports = config.get_ports();
        let port_of = |i: usize| match ports.len() {
            0 => Ok(5432),
            1 => Ok(ports[0]),
            n if n == config.get_hosts().len() => Ok(ports[i]),
            n => Err(BackendError::Config(format!(
                "{n} ports for {} hosts",
                config.get_hosts().len()
            ))),
        };
        let mut addresses = Vec::new();
        for (i, host) in config.get_hosts().iter().enumerate() {
            let port = port_of(i)?;
            addresses.push(match host {
                tokio_postgres::config::Host::Tcp(host) => BackendAddress::Tcp(host.clone(), port),
                tokio_postgres::config::Host::Unix(dir) => {
                    BackendAddress::Unix(dir.join(format!(".s.PGSQL.{port}")))
                }
            });
        }
        if addresses.is_empty() {
            addresses.push(BackendAddress::Tcp("localhost".into(), port_of(0)?));
        }
        let read_write = match config.get_target_session_attrs() {
            tokio_postgres::config::TargetSessionAttrs::Any => false,
            tokio_postgres::config::TargetSessionAttrs::ReadWrite => true,
            other => {
                return Err(BackendError::Config(format!(
                    "target_session_attrs {other:?} is not supported (any or read-write)"
                )))
            }
        };
        let user = config
            .get_user()
            .map(str::to_string)
            .ok_or_else(|| BackendError::Config("the backend URL names no user".into()))?;
        Ok(BackendTarget {
            addresses,
            read_write,
            database: config.get_dbname().unwrap_or(&user).to_string(),
            user,
            password: config.get_password().map(<[u8]>::to_vec),
            application_name: None,
        })
    }

    pub async fn open_stream(address: &BackendAddress) -> std::io::Result<Box<dyn Stream>> {
        Ok(match address {
            BackendAddress::Tcp(host, port) => {
                let s = TcpStream::connect((host.as_str(), *port)).await?;
                s.set_nodelay(true)?;
                Box::new(s)
            }
            BackendAddress::Unix(path) => Box::new(UnixStream::connect(path).await?),
        })
    }

    /// Sends a CancelRequest for `key` on a fresh connection to the host
    /// that connection is on.
    pub async fn cancel(&self, key: BackendKey) -> std::io::Result<()> {
        let Some(address) = self.addresses.get(key.host) else {
            return Ok(());
        };
        let mut stream = BackendTarget::open_stream(address).await?;
        let mut packet = BytesMut::with_capacity(16);
        pp::cancel_request(key.pid, key.secret, &mut packet);
        stream.write_all(&packet).await?;
        stream.flush().await?;
        // PostgreSQL closes the socket once it has signalled the backend:
        // until then the signal may still be on its way.
        let mut byte = [0u8; 1];
        match tokio::time::timeout(CANCEL_TAKEN_WITHIN, stream.read(&mut byte)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "PostgreSQL did not close the cancel request's connection",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(config: &str) -> Result<BackendTarget, BackendError> {
        BackendTarget::from_config(&config.parse().unwrap())
    }

    #[test]
    fn several_hosts_are_tried_in_order_as_libpq_takes_them() {
        let t = target("host=a,/run/pg port=5433 user=u target_session_attrs=read-write").unwrap();
        let addresses: Vec<String> = t.addresses.iter().map(ToString::to_string).collect();
        assert_eq!(addresses, ["a:5433", "/run/pg/.s.PGSQL.5433"]);
        assert!(t.read_write);
        let t = target("postgres://u@a:1,b:2/db").unwrap();
        let addresses: Vec<String> = t.addresses.iter().map(ToString::to_string).collect();
        assert_eq!(addresses, ["a:1", "b:2"]);
        assert!(!t.read_write);
        assert_eq!(t.database, "db");
        assert!(matches!(
            target("host=a,b,c port=1,2 user=u"),
            Err(BackendError::Config(_))
        ));
        assert!(matches!(
            target("host=a user=u target_session_attrs=read-only"),
            Err(BackendError::Config(_))
        ));
    }
}
