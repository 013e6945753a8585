//! The embedded PostgreSQL: a private cluster queenwire creates, starts and
//! stops itself when no backend is configured (docs/running.md). Owns
//! finding server binaries, initdb, the process and running it as an
//! unprivileged user; knows nothing of queues, clients or the schema.
//!
//! # Layout of the data directory
//!
//! ```text
//! <data_dir>/
//!   pgdata/        PGDATA, made by initdb on the first start
//!   run/           unix_socket_directories: .s.PGSQL.5432 and its lock file
//!   postgres.log   stdout and stderr of initdb and postgres, appended run after run
//!   queenwire.lock locked (flock) by the queenwire using the directory
//! ```
//!
//! # Why it is done this way
//!
//! - PGDATA is a subdirectory so the data directory can also hold the log and
//!   the socket, and so initdb gets the empty directory it insists on.
//! - No TCP listener (`listen_addresses=''`): the cluster is reachable only
//!   through a socket in a 0700 directory, itself mode 0700, so only the
//!   cluster's OS user (and root) can connect. That is what makes
//!   `--auth=trust` safe. The port (5432) only names the socket file; without
//!   TCP, any number of embedded clusters coexist on one machine.
//! - The socket directory must be short: a Unix socket address holds at most
//!   107 bytes of path, so a data directory too deep is refused up front
//!   rather than by postgres in its log.
//! - postgres is started directly, not through pg_ctl, so it is our child: we
//!   know its pid without parsing files, see it exit, and reap it.
//! - postgres gets its own process group, so a Ctrl-C in a terminal reaches
//!   queenwire only, which stops the cluster after it has drained its
//!   clients.
//! - No `PR_SET_PDEATHSIG`: it fires when the *thread* that spawned the child
//!   exits, not the process, and would kill the cluster under a caller that
//!   starts it from a short-lived thread. So a queenwire killed with SIGKILL
//!   leaves postgres running; the next start finds it through
//!   `pgdata/postmaster.pid` and stops it (fast shutdown) before starting its
//!   own. That needs one queenwire per data directory: `queenwire.lock`
//!   enforces it (a lock the kernel drops with its holder, so a killed
//!   run leaves none behind). A stale pid file of a dead process is postgres's own
//!   business: it checks and replaces it.
//! - PostgreSQL refuses to run as root. Run as root, queenwire runs initdb and
//!   postgres as `postgres` (the user distributions create with the server
//!   packages) or else `nobody`, owning the whole data directory tree.
//! - Ready means a real client connection over the socket succeeded: the
//!   socket file appears before the server accepts connections (it answers
//!   "the database system is starting up" during recovery).
//! - An existing cluster starts with binaries of the major version that made
//!   it (`pgdata/PG_VERSION`); a new one gets the first binaries of version 15
//!   or newer, looking in PATH before `/usr/lib/postgresql/*/bin` (newest
//!   first), so a PATH set on purpose wins.
//! - `synchronous_commit` stays on (the default): a message acknowledged to a
//!   client must survive a crash of the machine.
//! - Processes are inspected through `/proc`: the embedded default targets
//!   Linux.

mod binaries;
mod error;
mod process;
mod run_as;

pub use binaries::find_server_binaries;
pub use error::EmbeddedError;

use binaries::{find_binaries_for_cluster, find_newest_binaries, read_cluster_major_version};
use error::io_error;
use process::{
    poll_until_ready, process_is_running, run_initdb, send_signal, server_command,
    stop_leftover_postmaster, wait_for_child, FAST_SHUTDOWN_TIMEOUT, FORCED_SHUTDOWN_TIMEOUT,
};
use run_as::{check_traversable, chown_tree, unprivileged_user_if_root};
use std::ffi::OsString;
use std::fs::{self, OpenOptions};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Child;

/// A directory holding `initdb` and `postgres` of one major version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerBinaries {
    pub bin_dir: PathBuf,
    pub major: u32,
}

const PGDATA_DIR: &str = "pgdata";
const SOCKET_DIR: &str = "run";
pub(super) const LOG_FILE: &str = "postgres.log";
const LOCK_FILE: &str = "queenwire.lock";
const PORT: u16 = 5432;
const USER: &str = "queenwire";
const DATABASE: &str = "postgres";
/// `sizeof(sockaddr_un.sun_path)` is 108 on Linux, including the final NUL.
const MAX_SOCKET_PATH_BYTES: usize = 107;

/// A running embedded cluster; stopped by [`EmbeddedPostgres::stop`] or on drop.
#[derive(Debug)]
pub struct EmbeddedPostgres {
    /// `None` once stopped.
    postmaster: Option<Child>,
    pid: u32,
    data_dir: PathBuf,
    socket_dir: PathBuf,
    log_path: PathBuf,
    port: u16,
    /// `queenwire.lock` in the data directory, locked until stopped.
    lock: Option<fs::File>,
}

impl EmbeddedPostgres {
    /// Blocking. initdb on first start, recover a leftover, start, wait until
    /// it accepts connections.
    pub fn start(data_dir: &Path) -> Result<EmbeddedPostgres, EmbeddedError> {
        EmbeddedPostgres::start_listening(data_dir, None)
    }

    /// [`start`](Self::start), and with `Some(port)` also listening on
    /// 127.0.0.1:`port` (trust authentication, as on the socket: for the
    /// benchmark's direct-over-TCP comparison, never for serving).
    pub fn start_listening(
        data_dir: &Path,
        tcp_port: Option<u16>,
    ) -> Result<EmbeddedPostgres, EmbeddedError> {
        let port = tcp_port.unwrap_or(PORT);
        let run_as = unprivileged_user_if_root()?;

        fs::create_dir_all(data_dir).map_err(io_error("create the data directory", data_dir))?;
        let data_dir = data_dir
            .canonicalize()
            .map_err(io_error("resolve the data directory", data_dir))?;
        let lock = lock_data_dir(&data_dir)?;
        let pgdata = data_dir.join(PGDATA_DIR);
        let socket_dir = data_dir.join(SOCKET_DIR);
        let log_path = data_dir.join(LOG_FILE);

        let cluster_major = read_cluster_major_version(&pgdata)?;
        let binaries = match cluster_major {
            Some(major) => find_binaries_for_cluster(major, &pgdata)?,
            None => find_newest_binaries()?,
        };
        check_socket_path_length(&socket_dir, port)?;
        if let Some(user) = &run_as {
            check_traversable(&data_dir, user)?;
        }

        create_private_dir(&pgdata)?;
        create_private_dir(&socket_dir)?;
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&log_path)
            .map_err(io_error("open the log file", &log_path))?;
        if cluster_major.is_some() {
            stop_leftover_postmaster(&pgdata)?;
        }
        if let Some(user) = &run_as {
            chown_tree(&data_dir, user)?;
        }

        if cluster_major.is_none() {
            tracing::info!(pgdata = %pgdata.display(), major = binaries.major, "creating the embedded PostgreSQL cluster");
            run_initdb(
                &binaries,
                &pgdata,
                &data_dir,
                run_as.as_ref(),
                &log,
                &log_path,
            )?;
        }

        let postgres = binaries.bin_dir.join("postgres");
        let mut command = server_command(&postgres, &data_dir, run_as.as_ref(), &log)?;
        command
            .arg("-D")
            .arg(&pgdata)
            .arg("-p")
            .arg(port.to_string())
            .arg("-c")
            .arg(if tcp_port.is_some() {
                "listen_addresses=127.0.0.1"
            } else {
                "listen_addresses="
            })
            .arg("-c")
            .arg(socket_directories_setting(&socket_dir))
            .arg("-c")
            .arg("unix_socket_permissions=0700")
            .process_group(0);
        let postmaster = command.spawn().map_err(|source| EmbeddedError::Spawn {
            program: postgres.clone(),
            source,
        })?;

        // From here on, dropping `embedded` stops the postmaster, so an error
        // while waiting does not leave it running.
        let mut embedded = EmbeddedPostgres {
            pid: postmaster.id(),
            postmaster: Some(postmaster),
            lock: Some(lock),
            data_dir,
            socket_dir,
            log_path,
            port,
        };
        embedded.wait_until_ready()?;
        tracing::info!(
            pid = embedded.pid,
            socket_dir = %embedded.socket_dir.display(),
            "embedded PostgreSQL {} is accepting connections",
            binaries.major
        );
        Ok(embedded)
    }

    /// The directory holding `.s.PGSQL.<port>`.
    pub fn socket_dir(&self) -> &Path {
        &self.socket_dir
    }

    /// Names the socket file; also the TCP port when started listening.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The superuser initdb created.
    pub fn user(&self) -> &str {
        USER
    }

    pub fn database(&self) -> &str {
        DATABASE
    }

    /// The postmaster's pid (still the last one after [`stop`](Self::stop)).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The directory given to [`start`](Self::start), made absolute.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// A configuration reaching the cluster over its socket.
    pub fn client_config(&self) -> tokio_postgres::Config {
        let mut config = tokio_postgres::Config::new();
        config
            .host_path(&self.socket_dir)
            .port(self.port)
            .user(USER)
            .dbname(DATABASE);
        config
    }

    /// Fast shutdown (SIGINT: disconnect clients, checkpoint, exit) and wait
    /// for the postmaster to exit; if it has not after 30 s, immediate
    /// shutdown (SIGQUIT), then SIGKILL.
    pub fn stop(&mut self) -> Result<(), EmbeddedError> {
        self.stop_postmaster()?;
        self.lock = None;
        Ok(())
    }

    fn stop_postmaster(&mut self) -> Result<(), EmbeddedError> {
        let Some(mut postmaster) = self.postmaster.take() else {
            return Ok(());
        };
        let pid = self.pid;
        for (signal, name, timeout) in [
            (libc::SIGINT, "SIGINT", FAST_SHUTDOWN_TIMEOUT),
            (libc::SIGQUIT, "SIGQUIT", FORCED_SHUTDOWN_TIMEOUT),
        ] {
            if let Err(error) = send_signal(pid, signal, name) {
                self.postmaster = Some(postmaster);
                return Err(error);
            }
            if let Some(status) = wait_for_child(&mut postmaster, pid, timeout)? {
                tracing::info!(pid, %status, "embedded PostgreSQL stopped");
                return Ok(());
            }
            tracing::warn!(
                pid,
                signal = name,
                ?timeout,
                "embedded PostgreSQL did not exit in time"
            );
        }
        postmaster.kill().map_err(|source| EmbeddedError::Signal {
            pid,
            signal: "SIGKILL",
            source,
        })?;
        postmaster
            .wait()
            .map_err(|source| EmbeddedError::Wait { pid, source })?;
        tracing::warn!(pid, "embedded PostgreSQL killed with SIGKILL");
        Ok(())
    }

    /// Whether the postmaster started here has exited (crashed, or was
    /// killed) without [`stop`](Self::stop).
    pub fn exited(&self) -> bool {
        self.postmaster.is_some() && !process_is_running(self.pid)
    }

    /// Lets go of the cluster without stopping it, as a queenwire killed
    /// with SIGKILL does: the postmaster keeps running (its pid is
    /// returned; the caller reaps it) and the data directory is free for
    /// the next start, which stops it.
    pub fn abandon(mut self) -> u32 {
        drop(self.postmaster.take());
        self.lock = None;
        self.pid
    }

    /// Polls with a real client connection, on a thread of its own so that
    /// `start` also works when called from inside a tokio runtime.
    fn wait_until_ready(&mut self) -> Result<(), EmbeddedError> {
        let config = self.client_config();
        let log_path = &self.log_path;
        let Some(postmaster) = self.postmaster.as_mut() else {
            return Ok(());
        };
        std::thread::scope(|scope| {
            scope
                .spawn(|| poll_until_ready(postmaster, &config, log_path))
                .join()
        })
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    }
}

impl Drop for EmbeddedPostgres {
    fn drop(&mut self) {
        if let Err(error) = self.stop() {
            tracing::warn!(%error, "could not stop the embedded PostgreSQL");
        }
    }
}

/// Takes the data directory's lock, held until the returned file is
/// dropped (or the process ends, however it ends: a queenwire killed with
/// SIGKILL leaves its postmaster running but not the lock, so the next
/// start may stop that postmaster). A second queenwire on a directory in
/// use is refused before it touches anything, rather than stopping the
/// first one's cluster as a leftover.
fn lock_data_dir(data_dir: &Path) -> Result<fs::File, EmbeddedError> {
    let path = data_dir.join(LOCK_FILE);
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&path)
        .map_err(io_error("open the lock file", &path))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(fs::TryLockError::WouldBlock) => Err(EmbeddedError::InUse {
            data_dir: data_dir.to_path_buf(),
        }),
        Err(fs::TryLockError::Error(e)) => Err(io_error("lock", &path)(e)),
    }
}

fn check_socket_path_length(socket_dir: &Path, port: u16) -> Result<(), EmbeddedError> {
    let path = socket_dir.join(format!(".s.PGSQL.{port}"));
    let len = path.as_os_str().len();
    if len > MAX_SOCKET_PATH_BYTES {
        return Err(EmbeddedError::SocketPathTooLong { path, len });
    }
    Ok(())
}

/// `unix_socket_directories` is a list; double quotes keep a path containing
/// a comma or spaces whole (a quote inside is doubled).
fn socket_directories_setting(socket_dir: &Path) -> OsString {
    let mut setting = b"unix_socket_directories=\"".to_vec();
    for &byte in socket_dir.as_os_str().as_bytes() {
        if byte == b'"' {
            setting.push(b'"');
        }
        setting.push(byte);
    }
    setting.push(b'"');
    OsString::from_vec(setting)
}

fn create_private_dir(dir: &Path) -> Result<(), EmbeddedError> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io_error("create", dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_path_longer_than_a_socket_address_is_refused() {
        let fits = PathBuf::from(format!("/{}", "d".repeat(MAX_SOCKET_PATH_BYTES - 15)));
        assert!(check_socket_path_length(&fits, PORT).is_ok());
        let too_long = PathBuf::from(format!("/{}", "d".repeat(MAX_SOCKET_PATH_BYTES - 14)));
        assert!(matches!(
            check_socket_path_length(&too_long, PORT),
            Err(EmbeddedError::SocketPathTooLong { len: 108, .. })
        ));
    }

    #[test]
    fn socket_directory_is_quoted_as_one_list_element() {
        assert_eq!(
            socket_directories_setting(Path::new("/data/a, \"b\"/run")),
            OsString::from("unix_socket_directories=\"/data/a, \"\"b\"\"/run\"")
        );
    }
}
