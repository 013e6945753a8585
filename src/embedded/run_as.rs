//! Running the cluster as an unprivileged OS user when queenwire runs as
//! root (PostgreSQL refuses root): which user, whether it can reach the data
//! directory, and handing it the tree.

use super::error::{io_error, EmbeddedError};
use std::ffi::CStr;
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The OS user the cluster runs as when queenwire runs as root.
#[derive(Debug, Clone)]
pub(super) struct RunAs {
    pub(super) name: &'static str,
    pub(super) uid: u32,
    pub(super) gid: u32,
}

pub(super) fn unprivileged_user_if_root() -> Result<Option<RunAs>, EmbeddedError> {
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
pub(super) fn check_traversable(data_dir: &Path, user: &RunAs) -> Result<(), EmbeddedError> {
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
pub(super) fn chown_tree(path: &Path, user: &RunAs) -> Result<(), EmbeddedError> {
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
