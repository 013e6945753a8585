//! The code base's shape, as docs/architecture.md promises it: no file
//! under src/ over 700 lines, raw message tag bytes only in src/protocol,
//! and no import cycle between files (tests/tools/import_cycles.py).

use std::path::{Path, PathBuf};

const MAX_LINES: usize = 700;

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src/ is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn src_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    sources(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    files.sort();
    files
}

#[test]
fn no_source_file_is_over_700_lines() {
    let long: Vec<String> = src_files()
        .into_iter()
        .filter_map(|path| {
            let lines = std::fs::read_to_string(&path).ok()?.lines().count();
            (lines > MAX_LINES).then(|| format!("{} ({lines} lines)", path.display()))
        })
        .collect();
    assert!(long.is_empty(), "split these files: {long:?}");
}

/// A byte literal of one letter or digit: how a message tag looks in code.
fn tag_like_literals(text: &str) -> usize {
    let bytes = text.as_bytes();
    bytes
        .windows(4)
        .filter(|w| w[0] == b'b' && w[1] == b'\'' && w[2].is_ascii_alphanumeric() && w[3] == b'\'')
        .count()
}

#[test]
fn raw_tag_bytes_appear_only_in_the_protocol_module() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    // The lexers and the JSON reader read characters, not message tags.
    let allowed = ["protocol", "rewrite"];
    let offenders: Vec<String> = src_files()
        .into_iter()
        .filter(|path| {
            let top = path
                .strip_prefix(&root)
                .ok()
                .and_then(|p| p.components().next())
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .unwrap_or_default();
            !allowed.contains(&top.as_str())
        })
        .filter_map(|path| {
            let n = tag_like_literals(&std::fs::read_to_string(&path).ok()?);
            (n > 0).then(|| format!("{} ({n})", path.display()))
        })
        .collect();
    assert!(offenders.is_empty(), "use protocol::tags: {offenders:?}");
}

#[test]
fn no_import_cycle_between_files() {
    let root = env!("CARGO_MANIFEST_DIR");
    let out = std::process::Command::new("python3")
        .arg(format!("{root}/tests/tools/import_cycles.py"))
        .arg(format!("{root}/src"))
        .output()
        .expect("python3 runs the import-cycle check");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
