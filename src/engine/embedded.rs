//! The embedded PostgreSQL: a private cluster queenwire creates, starts and
//! stops itself when no backend is configured (DESIGN.md, "Running").
//!
//! # Layout of the data directory
//!
//! ```text
//! <data_dir>/
//!   pgdata/        PGDATA, made by initdb on the first start
//!   run/           unix_socket_directories: .s.PGSQL.5432 and its lock file
//!   postgres.log   stdout and stderr of initdb and postgres, appended run after run
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
//!   own. That assumes one queenwire per data directory, which the data
//!   directory is for. A stale pid file of a dead process is postgres's own
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

use std::ffi::{CStr, OsStr, OsString};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const MIN_MAJOR_VERSION: u32 = 15;
const DEBIAN_VERSIONS_DIR: &str = "/usr/lib/postgresql";
const PGDATA_DIR: &str = "pgdata";
const SOCKET_DIR: &str = "run";
const LOG_FILE: &str = "postgres.log";
const PORT: u16 = 5432;
const USER: &str = "queenwire";
const DATABASE: &str = "postgres";
/// `sizeof(sockaddr_un.sun_path)` is 108 on Linux, including the final NUL.
const MAX_SOCKET_PATH_BYTES: usize = 107;
const READY_TIMEOUT: Duration = Duration::from_secs(60);
const READY_POLL_INTERVAL: Duration = Duration::from_millis(100);
const CONNECT_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);
const FAST_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);
/// After SIGQUIT (immediate shutdown) and after SIGKILL.
const FORCED_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);
const EXIT_POLL_INTERVAL: Duration = Duration::from_millis(50);
const LOG_TAIL_BYTES: u64 = 8192;
const LOG_TAIL_LINES: usize = 20;

#[derive(Debug, thiserror::Error)]
pub enum EmbeddedError {
    #[error(
        "no PostgreSQL server binaries (initdb, postgres) of version 15 or newer found in PATH or /usr/lib/postgresql/*/bin{}; install them, e.g. `apt-get install postgresql`",
        describe_found(.found)
    )]
    NoServerBinaries { found: Vec<ServerBinaries> },

    #[error(
        "the cluster in {} was created by PostgreSQL {cluster_major}, but no server binaries of that version were found in PATH or /usr/lib/postgresql/*/bin{}; install them, e.g. `apt-get install postgresql-{cluster_major}`, or upgrade the cluster with pg_upgrade",
        .pgdata.display(),
        describe_found(.found)
    )]
    NoBinariesForCluster {
        pgdata: PathBuf,
        cluster_major: u32,
        found: Vec<ServerBinaries>,
    },

    #[error("could not {action} {}: {source}", .path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },

    #[error("could not look up the OS user `{name}`: {source}")]
    UserLookup {
        name: &'static str,
        source: io::Error,
    },

    #[error(
        "queenwire runs as root, which PostgreSQL refuses, and neither a `postgres` nor a `nobody` OS user exists to run it as; create one, e.g. `useradd --system postgres`"
    )]
    NoUnprivilegedUser,

    #[error(
        "PostgreSQL must run as the unprivileged user `{user}` because queenwire runs as root, but `{user}` cannot enter {} (mode {mode:o}, owner uid {owner}); choose a data directory it can reach (e.g. under /var/lib) or let it in (e.g. `chmod o+x {}`)",
        .dir.display(),
        .dir.display()
    )]
    NotTraversable {
        user: String,
        dir: PathBuf,
        mode: u32,
        owner: u32,
    },

    #[error(
        "the socket path {} is {len} bytes, more than the 107 a Unix socket address holds; choose a data directory with a shorter path",
        .path.display()
    )]
    SocketPathTooLong { path: PathBuf, len: usize },

    #[error(
        "{} exists and is not empty but holds no PostgreSQL cluster (no PG_VERSION), probably left by an interrupted initdb; remove it so queenwire can create the cluster again",
        .pgdata.display()
    )]
    PgdataNotACluster { pgdata: PathBuf },

    #[error("could not run {}: {source}", .program.display())]
    Spawn { program: PathBuf, source: io::Error },

    #[error("initdb failed ({status}); see {}, which ends with:\n{log_tail}", .log.display())]
    InitdbFailed {
        status: ExitStatus,
        log: PathBuf,
        log_tail: String,
    },

    #[error(
        "a PostgreSQL (pid {pid}) left running on {} by an earlier run did not exit after SIGINT, SIGQUIT and SIGKILL",
        .pgdata.display()
    )]
    LeftoverWouldNotStop { pid: u32, pgdata: PathBuf },

    #[error("postgres exited ({status}) before accepting connections; see {}, which ends with:\n{log_tail}", .log.display())]
    ExitedEarly {
        status: ExitStatus,
        log: PathBuf,
        log_tail: String,
    },

    #[error(
        "postgres did not accept connections within {waited:?} (last attempt: {last_error}); see {}, which ends with:\n{log_tail}",
        .log.display()
    )]
    NotReady {
        waited: Duration,
        last_error: String,
        log: PathBuf,
        log_tail: String,
    },

    #[error("could not build the runtime for the readiness check: {source}")]
    ProbeRuntime { source: io::Error },

    #[error("could not send {signal} to postgres (pid {pid}): {source}")]
    Signal {
        pid: u32,
        signal: &'static str,
        source: io::Error,
    },

    #[error("could not wait for postgres (pid {pid}) to exit: {source}")]
    Wait { pid: u32, source: io::Error },
}

fn describe_found(found: &[ServerBinaries]) -> String {
    if found.is_empty() {
        return String::new();
    }
    let listed: Vec<String> = found
        .iter()
        .map(|binaries| format!("{} in {}", binaries.major, binaries.bin_dir.display()))
        .collect();
    format!(" (found only: {})", listed.join(", "))
}

/// A directory holding `initdb` and `postgres` of one major version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerBinaries {
    pub bin_dir: PathBuf,
    pub major: u32,
}

/// The OS user the cluster runs as when queenwire runs as root.
#[derive(Debug, Clone)]
struct RunAs {
    name: &'static str,
    uid: u32,
    gid: u32,
}

/// A running embedded cluster; stopped by [`EmbeddedPostgres::stop`] or on drop.
#[derive(Debug)]
pub struct EmbeddedPostgres {
    /// `None` once stopped.
    postmaster: Option<Child>,
    pid: u32,
    data_dir: PathBuf,
    socket_dir: PathBuf,
    log_path: PathBuf,
}

impl EmbeddedPostgres {
    /// Blocking. initdb on first start, recover a leftover, start, wait until
    /// it accepts connections.
    pub fn start(data_dir: &Path) -> Result<EmbeddedPostgres, EmbeddedError> {
        let run_as = unprivileged_user_if_root()?;

        fs::create_dir_all(data_dir).map_err(io_error("create the data directory", data_dir))?;
        let data_dir = data_dir
            .canonicalize()
            .map_err(io_error("resolve the data directory", data_dir))?;
        let pgdata = data_dir.join(PGDATA_DIR);
        let socket_dir = data_dir.join(SOCKET_DIR);
        let log_path = data_dir.join(LOG_FILE);

        let cluster_major = read_cluster_major_version(&pgdata)?;
        let binaries = match cluster_major {
            Some(major) => find_binaries_for_cluster(major, &pgdata)?,
            None => find_newest_binaries()?,
        };
        check_socket_path_length(&socket_dir)?;
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
            .arg(PORT.to_string())
            .arg("-c")
            .arg("listen_addresses=")
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
            data_dir,
            socket_dir,
            log_path,
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

    /// Only names the socket file: the cluster listens on no TCP port.
    pub fn port(&self) -> u16 {
        PORT
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
            .port(PORT)
            .user(USER)
            .dbname(DATABASE);
        config
    }

    /// Fast shutdown (SIGINT: disconnect clients, checkpoint, exit) and wait
    /// for the postmaster to exit; if it has not after 30 s, immediate
    /// shutdown (SIGQUIT), then SIGKILL.
    pub fn stop(&mut self) -> Result<(), EmbeddedError> {
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

/// The first directory holding `initdb` and `postgres` of version 15 or
/// newer: PATH first (symlinks resolved), then `/usr/lib/postgresql/*/bin`,
/// newest first.
pub fn find_server_binaries() -> Result<PathBuf, EmbeddedError> {
    find_newest_binaries().map(|binaries| binaries.bin_dir)
}

/// Every candidate directory that holds working server binaries, in
/// search order.
fn installed_binaries() -> Vec<ServerBinaries> {
    candidate_bin_dirs()
        .into_iter()
        .filter_map(|bin_dir| probe_binaries(&bin_dir))
        .collect()
}

fn find_newest_binaries() -> Result<ServerBinaries, EmbeddedError> {
    let found = installed_binaries();
    match found
        .iter()
        .find(|binaries| binaries.major >= MIN_MAJOR_VERSION)
    {
        Some(binaries) => Ok(binaries.clone()),
        None => Err(EmbeddedError::NoServerBinaries { found }),
    }
}

fn find_binaries_for_cluster(
    cluster_major: u32,
    pgdata: &Path,
) -> Result<ServerBinaries, EmbeddedError> {
    let found = installed_binaries();
    match found
        .iter()
        .find(|binaries| binaries.major == cluster_major)
    {
        Some(binaries) => Ok(binaries.clone()),
        None => Err(EmbeddedError::NoBinariesForCluster {
            pgdata: pgdata.to_path_buf(),
            cluster_major,
            found,
        }),
    }
}

/// Directories holding both `initdb` and `postgres`, in order of preference,
/// without duplicates (a PATH entry often links into the Debian layout).
fn candidate_bin_dirs() -> Vec<PathBuf> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            // Debian links single binaries into PATH (e.g. /usr/local/bin),
            // so the real directory is where the resolved links point.
            let initdb = dir.join("initdb").canonicalize();
            let postgres = dir.join("postgres").canonicalize();
            if let (Ok(initdb), Ok(postgres)) = (initdb, postgres) {
                if let (Some(initdb_dir), Some(postgres_dir)) = (initdb.parent(), postgres.parent())
                {
                    if initdb_dir == postgres_dir {
                        candidates.push(postgres_dir.to_path_buf());
                    }
                }
            }
        }
    }

    let mut versioned: Vec<(u32, PathBuf)> = fs::read_dir(DEBIAN_VERSIONS_DIR)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let major = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin_dir = entry.path().join("bin").canonicalize().ok()?;
            let complete = bin_dir.join("initdb").is_file() && bin_dir.join("postgres").is_file();
            complete.then_some((major, bin_dir))
        })
        .collect();
    versioned.sort_by_key(|(major, _)| std::cmp::Reverse(*major));
    candidates.extend(versioned.into_iter().map(|(_, bin_dir)| bin_dir));

    let mut unique = Vec::with_capacity(candidates.len());
    for dir in candidates {
        if !unique.contains(&dir) {
            unique.push(dir);
        }
    }
    unique
}

/// `None` when either binary does not run or the two disagree on the version.
fn probe_binaries(bin_dir: &Path) -> Option<ServerBinaries> {
    let postgres_major = binary_major_version(&bin_dir.join("postgres"))?;
    let initdb_major = binary_major_version(&bin_dir.join("initdb"))?;
    (postgres_major == initdb_major).then(|| ServerBinaries {
        bin_dir: bin_dir.to_path_buf(),
        major: postgres_major,
    })
}

fn binary_major_version(program: &Path) -> Option<u32> {
    let output = Command::new(program)
        .arg("--version")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    parse_major_version(&String::from_utf8_lossy(&output.stdout))
}

/// The major version in `postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)`,
/// `initdb (PostgreSQL) 17beta1` and the like.
fn parse_major_version(version_output: &str) -> Option<u32> {
    let number = version_output
        .split_whitespace()
        .find(|word| word.starts_with(|c: char| c.is_ascii_digit()))?;
    let digits: String = number.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// `Some(major)` when `pgdata` holds a cluster, `None` when initdb is still to
/// run (missing or empty directory).
fn read_cluster_major_version(pgdata: &Path) -> Result<Option<u32>, EmbeddedError> {
    let version_file = pgdata.join("PG_VERSION");
    match fs::read_to_string(&version_file) {
        Ok(text) => match text.trim().parse::<u32>() {
            Ok(major) => Ok(Some(major)),
            Err(_) => Err(EmbeddedError::Io {
                action: "read a major version number from",
                path: version_file,
                source: io::Error::new(io::ErrorKind::InvalidData, text.trim().to_owned()),
            }),
        },
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            let empty_or_missing = match fs::read_dir(pgdata) {
                Ok(mut entries) => entries.next().is_none(),
                Err(error) if error.kind() == io::ErrorKind::NotFound => true,
                Err(source) => {
                    return Err(EmbeddedError::Io {
                        action: "list",
                        path: pgdata.to_path_buf(),
                        source,
                    })
                }
            };
            if empty_or_missing {
                Ok(None)
            } else {
                Err(EmbeddedError::PgdataNotACluster {
                    pgdata: pgdata.to_path_buf(),
                })
            }
        }
        Err(source) => Err(EmbeddedError::Io {
            action: "read",
            path: version_file,
            source,
        }),
    }
}

fn check_socket_path_length(socket_dir: &Path) -> Result<(), EmbeddedError> {
    let path = socket_dir.join(format!(".s.PGSQL.{PORT}"));
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

/// initdb and postgres: output appended to the log, started in the data
/// directory (the caller's working directory may be closed to the run-as
/// user), as the run-as user if any.
fn server_command(
    program: &Path,
    data_dir: &Path,
    run_as: Option<&RunAs>,
    log: &File,
) -> Result<Command, EmbeddedError> {
    let log_handle = || {
        log.try_clone()
            .map_err(io_error("duplicate the handle of", data_dir.join(LOG_FILE)))
    };
    let mut command = Command::new(program);
    command
        .current_dir(data_dir)
        .stdin(Stdio::null())
        .stdout(log_handle()?)
        .stderr(log_handle()?);
    if let Some(user) = run_as {
        // std drops the supplementary groups before setuid, so the child
        // has exactly this uid and gid.
        command.uid(user.uid).gid(user.gid);
    }
    Ok(command)
}

fn run_initdb(
    binaries: &ServerBinaries,
    pgdata: &Path,
    data_dir: &Path,
    run_as: Option<&RunAs>,
    log: &File,
    log_path: &Path,
) -> Result<(), EmbeddedError> {
    let initdb = binaries.bin_dir.join("initdb");
    let status = server_command(&initdb, data_dir, run_as, log)?
        .arg("-D")
        .arg(pgdata)
        .args([
            "--username=queenwire",
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-instructions",
        ])
        .status()
        .map_err(|source| EmbeddedError::Spawn {
            program: initdb,
            source,
        })?;
    if !status.success() {
        return Err(EmbeddedError::InitdbFailed {
            status,
            log: log_path.to_path_buf(),
            log_tail: log_tail(log_path),
        });
    }
    Ok(())
}

fn poll_until_ready(
    postmaster: &mut Child,
    config: &tokio_postgres::Config,
    log_path: &Path,
) -> Result<(), EmbeddedError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| EmbeddedError::ProbeRuntime { source })?;
    let started = Instant::now();
    loop {
        let exited = postmaster
            .try_wait()
            .map_err(|source| EmbeddedError::Wait {
                pid: postmaster.id(),
                source,
            })?;
        if let Some(status) = exited {
            return Err(EmbeddedError::ExitedEarly {
                status,
                log: log_path.to_path_buf(),
                log_tail: log_tail(log_path),
            });
        }
        let last_error = match runtime.block_on(connect_once(config)) {
            Ok(()) => return Ok(()),
            Err(error) => error,
        };
        if started.elapsed() >= READY_TIMEOUT {
            return Err(EmbeddedError::NotReady {
                waited: started.elapsed(),
                last_error,
                log: log_path.to_path_buf(),
                log_tail: log_tail(log_path),
            });
        }
        std::thread::sleep(READY_POLL_INTERVAL);
    }
}

/// Connects, then disconnects cleanly (dropping the client sends Terminate
/// and lets the connection future finish).
async fn connect_once(config: &tokio_postgres::Config) -> Result<(), String> {
    let attempt = async {
        let (client, connection) = config.connect(tokio_postgres::NoTls).await?;
        drop(client);
        connection.await
    };
    match tokio::time::timeout(CONNECT_ATTEMPT_TIMEOUT, attempt).await {
        Ok(result) => result.map_err(|error| error.to_string()),
        Err(_) => Err(format!("no answer within {CONNECT_ATTEMPT_TIMEOUT:?}")),
    }
}

/// A postmaster left running on `pgdata` (queenwire killed with SIGKILL)
/// would make ours refuse to start; stop it the way we stop our own.
fn stop_leftover_postmaster(pgdata: &Path) -> Result<(), EmbeddedError> {
    let pid_file = pgdata.join("postmaster.pid");
    let contents = match fs::read_to_string(&pid_file) {
        Ok(contents) => contents,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(EmbeddedError::Io {
                action: "read",
                path: pid_file,
                source,
            })
        }
    };
    // Line 1 is the pid (negative for a single-user backend), line 2 the data
    // directory. A malformed file is left for postgres to judge.
    let Some(pid) = contents
        .lines()
        .next()
        .and_then(|line| line.trim().parse::<i64>().ok())
        .and_then(|pid| u32::try_from(pid.unsigned_abs()).ok())
    else {
        return Ok(());
    };
    if pid == 0 || pid == std::process::id() || !is_postgres_for(pid, pgdata) {
        return Ok(());
    }

    tracing::warn!(pid, pgdata = %pgdata.display(), "stopping a PostgreSQL left running by an earlier run");
    for (signal, name, timeout) in [
        (libc::SIGINT, "SIGINT", FAST_SHUTDOWN_TIMEOUT),
        (libc::SIGQUIT, "SIGQUIT", FORCED_SHUTDOWN_TIMEOUT),
        (libc::SIGKILL, "SIGKILL", FORCED_SHUTDOWN_TIMEOUT),
    ] {
        send_signal(pid, signal, name)?;
        if wait_for_exit(pid, timeout) {
            return Ok(());
        }
    }
    Err(EmbeddedError::LeftoverWouldNotStop {
        pid,
        pgdata: pgdata.to_path_buf(),
    })
}

/// A running postgres started with `-D <pgdata>`: a stale pid file may name a
/// pid the system has since given to an unrelated process.
fn is_postgres_for(pid: u32, pgdata: &Path) -> bool {
    if !process_is_running(pid) {
        return false;
    }
    let Ok(cmdline) = fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let mut args = cmdline.split(|&byte| byte == 0);
    let is_postgres = args.next().is_some_and(|program| {
        Path::new(OsStr::from_bytes(program))
            .file_name()
            .is_some_and(|name| name.as_bytes().windows(8).any(|w| w == b"postgres"))
    });
    is_postgres && args.any(|arg| arg == pgdata.as_os_str().as_bytes())
}

/// A zombie (exited, not yet reaped by its parent) counts as gone, although
/// `kill(pid, 0)` still succeeds on it.
fn process_is_running(pid: u32) -> bool {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the command name, which is in parentheses and may
    // itself contain spaces and parentheses.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next())
        .is_some_and(|state| state != 'Z' && state != 'X')
}

fn wait_for_exit(pid: u32, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while process_is_running(pid) {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(EXIT_POLL_INTERVAL);
    }
    true
}

fn wait_for_child(
    child: &mut Child,
    pid: u32,
    timeout: Duration,
) -> Result<Option<ExitStatus>, EmbeddedError> {
    let deadline = Instant::now() + timeout;
    loop {
        let exited = child
            .try_wait()
            .map_err(|source| EmbeddedError::Wait { pid, source })?;
        if exited.is_some() || Instant::now() >= deadline {
            return Ok(exited);
        }
        std::thread::sleep(EXIT_POLL_INTERVAL);
    }
}

/// A process already gone (ESRCH) is not an error: that is what we want.
fn send_signal(pid: u32, signal: libc::c_int, name: &'static str) -> Result<(), EmbeddedError> {
    let Ok(raw_pid) = libc::pid_t::try_from(pid) else {
        return Err(EmbeddedError::Signal {
            pid,
            signal: name,
            source: io::Error::from_raw_os_error(libc::ESRCH),
        });
    };
    // SAFETY: kill has no memory-safety preconditions.
    if unsafe { libc::kill(raw_pid, signal) } == 0 {
        return Ok(());
    }
    let source = io::Error::last_os_error();
    if source.raw_os_error() == Some(libc::ESRCH) {
        return Ok(());
    }
    Err(EmbeddedError::Signal {
        pid,
        signal: name,
        source,
    })
}

fn unprivileged_user_if_root() -> Result<Option<RunAs>, EmbeddedError> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(None);
    }
    if let Some(user) = lookup_user("postgres", c"postgres")? {
        return Ok(Some(user));
    }
    match lookup_user("nobody", c"nobody")? {
        Some(user) => Ok(Some(user)),
        None => Err(EmbeddedError::NoUnprivilegedUser),
    }
}

fn lookup_user(name: &'static str, c_name: &CStr) -> Result<Option<RunAs>, EmbeddedError> {
    let mut buffer: Vec<libc::c_char> = vec![0; 4096];
    loop {
        // SAFETY: zeroed is a valid passwd (null pointers, zero ids); it is
        // only read after getpwnam_r filled it in.
        let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: every pointer is valid for the call and the buffer length
        // is its real length.
        let rc = unsafe {
            libc::getpwnam_r(
                c_name.as_ptr(),
                &mut entry,
                buffer.as_mut_ptr(),
                buffer.len(),
                &mut result,
            )
        };
        match rc {
            0 if result.is_null() => return Ok(None),
            0 => {
                return Ok(Some(RunAs {
                    name,
                    uid: entry.pw_uid,
                    gid: entry.pw_gid,
                }))
            }
            libc::ERANGE if buffer.len() < 1 << 20 => buffer.resize(buffer.len() * 2, 0),
            // Several libcs report "no such user" as one of these.
            libc::ENOENT | libc::ESRCH | libc::EBADF | libc::EPERM => return Ok(None),
            errno => {
                return Err(EmbeddedError::UserLookup {
                    name,
                    source: io::Error::from_raw_os_error(errno),
                })
            }
        }
    }
}

/// Every ancestor of the data directory must let the run-as user search it
/// (the data directory itself is given to that user). The same rule as the
/// kernel's: owner bits for the owner, else group bits for the group, else
/// other bits; the child has no supplementary groups.
fn check_traversable(data_dir: &Path, user: &RunAs) -> Result<(), EmbeddedError> {
    for dir in data_dir.ancestors().skip(1) {
        let metadata = fs::metadata(dir).map_err(io_error("inspect", dir))?;
        let mode = metadata.mode();
        let search_bit = if metadata.uid() == user.uid {
            0o100
        } else if metadata.gid() == user.gid {
            0o010
        } else {
            0o001
        };
        if mode & search_bit == 0 {
            return Err(EmbeddedError::NotTraversable {
                user: user.name.to_owned(),
                dir: dir.to_path_buf(),
                mode: mode & 0o7777,
                owner: metadata.uid(),
            });
        }
    }
    Ok(())
}

/// Hands the data directory tree to the run-as user, symlinks themselves
/// rather than their targets. Entries vanishing meanwhile are skipped.
fn chown_tree(path: &Path, user: &RunAs) -> Result<(), EmbeddedError> {
    let metadata = match fs::symlink_metadata(path) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(EmbeddedError::Io {
                action: "inspect",
                path: path.to_path_buf(),
                source,
            })
        }
    };
    if metadata.uid() != user.uid || metadata.gid() != user.gid {
        std::os::unix::fs::lchown(path, Some(user.uid), Some(user.gid))
            .map_err(io_error("change the owner of", path))?;
    }
    if metadata.is_dir() {
        let entries = fs::read_dir(path).map_err(io_error("list", path))?;
        for entry in entries {
            let entry = entry.map_err(io_error("list", path))?;
            chown_tree(&entry.path(), user)?;
        }
    }
    Ok(())
}

/// The end of the log, for error messages; best effort, since the error being
/// reported matters more than a log we cannot read.
fn log_tail(log_path: &Path) -> String {
    let read_tail = || -> io::Result<String> {
        let mut file = File::open(log_path)?;
        let len = file.metadata()?.len();
        file.seek(SeekFrom::Start(len.saturating_sub(LOG_TAIL_BYTES)))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let text = String::from_utf8_lossy(&bytes);
        let lines: Vec<&str> = text.lines().collect();
        Ok(lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n"))
    };
    read_tail().unwrap_or_else(|error| format!("(the log could not be read: {error})"))
}

fn io_error(
    action: &'static str,
    path: impl Into<PathBuf>,
) -> impl FnOnce(io::Error) -> EmbeddedError {
    let path = path.into();
    move |source| EmbeddedError::Io {
        action,
        path,
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn major_version_is_read_from_release_and_development_versions() {
        assert_eq!(
            parse_major_version("postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)\n"),
            Some(15)
        );
        assert_eq!(parse_major_version("initdb (PostgreSQL) 17beta1"), Some(17));
        assert_eq!(parse_major_version("postgres (PostgreSQL) 9.6.24"), Some(9));
        assert_eq!(parse_major_version("not a version"), None);
    }

    #[test]
    fn socket_path_longer_than_a_socket_address_is_refused() {
        let fits = PathBuf::from(format!("/{}", "d".repeat(MAX_SOCKET_PATH_BYTES - 15)));
        assert!(check_socket_path_length(&fits).is_ok());
        let too_long = PathBuf::from(format!("/{}", "d".repeat(MAX_SOCKET_PATH_BYTES - 14)));
        assert!(matches!(
            check_socket_path_length(&too_long),
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

    #[test]
    fn missing_binaries_error_says_what_to_install() {
        let error = EmbeddedError::NoServerBinaries {
            found: vec![ServerBinaries {
                bin_dir: PathBuf::from("/usr/lib/postgresql/13/bin"),
                major: 13,
            }],
        };
        assert_eq!(
            error.to_string(),
            "no PostgreSQL server binaries (initdb, postgres) of version 15 or newer found in PATH or /usr/lib/postgresql/*/bin (found only: 13 in /usr/lib/postgresql/13/bin); install them, e.g. `apt-get install postgresql`"
        );
    }
}
