//! Where clients connect: the TCP listener and, when asked for, a Unix
//! socket `.s.PGSQL.<port>` in a directory, the name PostgreSQL and
//! PgBouncer use, so `psql -h DIR -p PORT` (and every libpq-based driver
//! given a directory as its host) finds it.
//!
//! A Unix socket is local: without a users file it is trusted like a
//! loopback address; with one, its clients authenticate like any other.
//! TLS is declined on it (as PostgreSQL does): its access is the file's.

use super::client::{ClientStream, Peer};
use std::path::{Path, PathBuf};
use tokio::net::{TcpListener, UnixListener};

/// Connections a listener queues before they are accepted: many clients
/// reconnecting at once (after a restart) must not wait for SYN retries
/// (tokio's default is 128; the kernel caps it at somaxconn).
const LISTEN_BACKLOG: u32 = 4096;

/// Binds the first address `listen` resolves to that takes it.
pub async fn bind_tcp(listen: &str) -> std::io::Result<TcpListener> {
    let mut last = None;
    for addr in tokio::net::lookup_host(listen).await? {
        let socket = if addr.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        socket.set_reuseaddr(true)?;
        match socket
            .bind(addr)
            .and_then(|()| socket.listen(LISTEN_BACKLOG))
        {
            Ok(listener) => return Ok(listener),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the address resolves to nothing",
        )
    }))
}

/// The socket file, removed when the listener goes (a drain, a stop).
#[derive(Debug)]
pub struct SocketFile(PathBuf);

impl SocketFile {
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The socket's path for a directory and port, as libpq builds it.
pub fn socket_path(dir: &Path, port: u16) -> PathBuf {
    dir.join(format!(".s.PGSQL.{port}"))
}

/// Binds `DIR/.s.PGSQL.<port>`. A file left there by a process that is
/// gone (nothing accepts on it) is replaced; one that a live server
/// accepts on is an error, never taken over. The socket is open to every
/// local user (mode 0777, PostgreSQL's default): who may log in is the
/// users file's decision, as over TCP.
pub fn bind_unix(dir: &Path, port: u16) -> std::io::Result<(UnixListener, SocketFile)> {
    use std::os::unix::fs::PermissionsExt;
    if !dir.is_dir() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{} is not a directory", dir.display()),
        ));
    }
    let path = socket_path(dir, port);
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(&path).is_ok() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                format!("{} is in use by a running server", path.display()),
            ));
        }
        std::fs::remove_file(&path)?;
    }
    let listener = UnixListener::bind(&path)?;
    let file = SocketFile(path);
    // The TCP listener's backlog (tokio binds with 128): listening again
    // on a listening socket only changes it.
    use std::os::fd::AsRawFd;
    let backlog = i32::try_from(LISTEN_BACKLOG).unwrap_or(i32::MAX);
    // SAFETY: listen(2) on a socket this function owns.
    if unsafe { libc::listen(listener.as_raw_fd(), backlog) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    std::fs::set_permissions(file.path(), std::fs::Permissions::from_mode(0o777))?;
    Ok((listener, file))
}

/// The listeners of one queenwire.
pub struct Listeners {
    pub tcp: TcpListener,
    pub unix: Option<(UnixListener, SocketFile)>,
}

impl Listeners {
    /// The next client on either listener.
    pub async fn accept(&self) -> std::io::Result<(ClientStream, Peer)> {
        let unix = async {
            match &self.unix {
                Some((listener, _)) => listener.accept().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            accepted = self.tcp.accept() => {
                let (stream, peer) = accepted?;
                let _ = stream.set_nodelay(true);
                Ok((ClientStream::Plain(stream), Peer::Tcp(peer)))
            }
            accepted = unix => {
                let (stream, _) = accepted?;
                Ok((ClientStream::Unix(stream), Peer::Unix))
            }
        }
    }
}
