//! CPU time and memory of the processes under test, from /proc (Linux).

use std::fs;

/// Clock ticks per second of /proc/<pid>/stat times.
fn ticks_per_sec() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as u64
    } else {
        100
    }
}

/// (ppid, utime + stime, cutime + cstime) in ticks.
fn stat(pid: u32) -> Option<(u32, u64, u64)> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces.
    let rest = &text[text.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state): ppid is field 4, utime 14 .. cstime 17.
    let num = |i: usize| f.get(i - 3).and_then(|s| s.parse::<u64>().ok());
    Some((num(4)? as u32, num(14)? + num(15)?, num(16)? + num(17)?))
}

/// CPU time of one process and the children it has reaped, in µs.
pub fn process_cpu_us(pid: u32) -> u64 {
    stat(pid).map_or(0, |(_, own, reaped)| {
        (own + reaped) * 1_000_000 / ticks_per_sec()
    })
}

/// CPU time of a PostgreSQL cluster, in µs: the postmaster with the backends
/// it has reaped, plus every live child. A backend that exits between two
/// samples moves from the second term to the first, so differences hold.
pub fn cluster_cpu_us(postmaster: u32) -> u64 {
    let mut ticks = stat(postmaster).map_or(0, |(_, own, reaped)| own + reaped);
    if let Ok(dir) = fs::read_dir("/proc") {
        for entry in dir.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            if let Some((ppid, own, _)) = stat(pid) {
                if ppid == postmaster {
                    ticks += own;
                }
            }
        }
    }
    ticks * 1_000_000 / ticks_per_sec()
}

/// CPU time of this process (the load generator), in µs.
pub fn self_cpu_us() -> u64 {
    rusage_us(libc::RUSAGE_SELF)
}

/// CPU time of this process's children that have exited and been waited
/// for, in µs (a pgbench run's, taken before and after it).
pub fn children_cpu_us() -> u64 {
    rusage_us(libc::RUSAGE_CHILDREN)
}

fn rusage_us(who: libc::c_int) -> u64 {
    // SAFETY: getrusage writes into the struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(who, &mut ru) } != 0 {
        return 0;
    }
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    us(ru.ru_utime) + us(ru.ru_stime)
}

/// A field of /proc/<pid>/status in kB (e.g. "VmHWM", "VmRSS").
pub fn status_kb(pid: u32, field: &str) -> Option<u64> {
    let text = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// Open file descriptors of a process (entries of /proc/<pid>/fd).
pub fn fd_count(pid: u32) -> Option<usize> {
    fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()
        .map(|d| d.count())
}

/// Raises this process's soft RLIMIT_NOFILE to its hard limit; returns the
/// soft limit now in force.
pub fn raise_nofile() -> u64 {
    // SAFETY: getrlimit and setrlimit write/read the struct we pass.
    unsafe {
        let mut lim: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 0;
        }
        lim.rlim_cur = lim.rlim_max;
        if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        }
        lim.rlim_cur
    }
}

/// A short description of the machine: cores, memory, CPU model.
pub fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem_gib = fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        })
        .map_or(0.0, |kb| kb as f64 / 1024.0 / 1024.0);
    let model = fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    format!("{cores} cores ({model}), {mem_gib:.1} GiB memory")
}
