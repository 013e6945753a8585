//! Finding PostgreSQL server binaries: PATH first, then the Debian layout,
//! and the major version a cluster needs.

use super::error::EmbeddedError;
use super::ServerBinaries;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const MIN_MAJOR_VERSION: u32 = 15;
const DEBIAN_VERSIONS_DIR: &str = "/usr/lib/postgresql";

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

pub(super) fn find_newest_binaries() -> Result<ServerBinaries, EmbeddedError> {
    let found = installed_binaries();
    match found
        .iter()
        .find(|binaries| binaries.major >= MIN_MAJOR_VERSION)
    {
        Some(binaries) => Ok(binaries.clone()),
        None => Err(EmbeddedError::NoServerBinaries { found }),
    }
}

pub(super) fn find_binaries_for_cluster(
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
pub(super) fn read_cluster_major_version(pgdata: &Path) -> Result<Option<u32>, EmbeddedError> {
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
}
