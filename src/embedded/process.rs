//! The cluster's processes: running initdb and postgres, waiting until it
//! accepts connections, and stopping a postmaster (ours, or one left by an
//! earlier run) by signal.

use super::error::{io_error, log_tail, EmbeddedError};
use super::run_as::RunAs;
use super::{ServerBinaries, LOG_FILE};
use std::ffi::OsStr;
use std::fs::{self, File};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const READY_TIMEOUT: Duration = Duration::from_secs(60);
const READY_POLL_INTERVAL: Duration = Duration::from_millis(100);
const CONNECT_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);
pub(super) const FAST_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);
/// After SIGQUIT (immediate shutdown) and after SIGKILL.
pub(super) const FORCED_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);
const EXIT_POLL_INTERVAL: Duration = Duration::from_millis(50);

/// initdb and postgres: output appended to the log, started in the data
/// directory (the caller's working directory may be closed to the run-as
/// user), as the run-as user if any.
pub(super) fn server_command(
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

pub(super) fn run_initdb(
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

pub(super) fn poll_until_ready(
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
pub(super) fn stop_leftover_postmaster(pgdata: &Path) -> Result<(), EmbeddedError> {
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
pub(super) fn process_is_running(pid: u32) -> bool {
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

pub(super) fn wait_for_child(
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
pub(super) fn send_signal(
    pid: u32,
    signal: libc::c_int,
    name: &'static str,
) -> Result<(), EmbeddedError> {
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
