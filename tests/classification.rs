//! Every statement of PostgreSQL's own regression suite through each of
//! the passes the session classifies plain SQL with today, compared with
//! the verdicts recorded in `tests/classification/pg_regress_verdicts`:
//! a rewrite of the passes (one pass over the text instead of several)
//! must give every statement the same verdict. One test per pass, so a
//! failure names the pass that changed.
//!
//! The suite's SQL files are not in this repository: `tests/pg_regress/run`
//! fetches PostgreSQL's sources into its cache, and these tests read them
//! there (or from `QW_PG_REGRESS_SQL`, the suite's `sql` directory); without
//! them they say so and pass. `QW_BLESS=1` writes the record anew from
//! today's passes.
//!
//! The record is kept small: per file, its statement count and a digest of
//! where the split put each statement; then only the statements some pass
//! says something of (a dialect statement, a session effect, transaction
//! control, LISTEN, ...), by their number in the file, one `pass:verdict`
//! each. A statement not listed is plain SQL every pass leaves alone.

use queenwire::rewrite::{self, passthrough, split, Command, SessionEffect};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

const RECORD: &str = "tests/classification/pg_regress_verdicts";

/// One pass's verdict on a statement, `None` for its default answer (plain
/// SQL that it leaves alone). The record writes it as `pass:verdict`,
/// tokens separated by tabs (a verdict may hold spaces, never a tab: they
/// are written with `{:?}`).
type Pass = fn(&str) -> Option<String>;

/// The dialect recogniser (`rewrite::classify`): a dialect statement (its
/// kind) or one that does not parse (SQLSTATE and position).
fn dialect(sql: &str) -> Option<String> {
    match rewrite::classify(sql) {
        Command::Passthrough(_) => None,
        Command::Dialect(stmt) => {
            let debug = format!("{stmt:?}");
            Some(
                debug
                    .split(['(', ' ', '{'])
                    .next()
                    .unwrap_or("")
                    .to_string(),
            )
        }
        Command::Invalid(e) => Some(format!("invalid {} at {:?}", e.sqlstate.code(), e.position)),
    }
}

/// The session-effect probe, as the session sees it (plain SQL only).
fn effect(sql: &str) -> Option<String> {
    match rewrite::classify(sql) {
        Command::Passthrough(SessionEffect::None) => None,
        Command::Passthrough(effect) => Some(format!("{effect:?}")),
        _ => None,
    }
}

fn deallocated(sql: &str) -> Option<String> {
    passthrough::deallocated_name(sql).map(|name| format!("{name:?}"))
}

fn plain_begin(sql: &str) -> Option<String> {
    passthrough::plain_begin(sql).map(|tag| format!("{tag:?}"))
}

fn listening(sql: &str) -> Option<String> {
    passthrough::listening(sql).map(|l| format!("{l:?}"))
}

fn control(sql: &str) -> Option<String> {
    passthrough::transaction_control(sql).map(|c| format!("{c:?}"))
}

/// What a statement resets or sets of the session's settings.
fn settings(sql: &str) -> Option<String> {
    let resets = passthrough::resets(sql).map(|r| match r {
        passthrough::Resets::All => "resets all".to_string(),
        passthrough::Resets::Setting(name) => format!("resets {name:?}"),
    });
    let sets = passthrough::sets_setting(sql).map(|name| format!("sets {name:?}"));
    match (resets, sets) {
        (None, None) => None,
        (a, b) => Some([a, b].into_iter().flatten().collect::<Vec<_>>().join(", ")),
    }
}

/// Every pass, in the order of a record line's tokens.
const PASSES: [(&str, Pass); 7] = [
    ("dialect", dialect),
    ("effect", effect),
    ("deallocate", deallocated),
    ("begin", plain_begin),
    ("listening", listening),
    ("control", control),
    ("settings", settings),
];

/// The suite's `sql` directory and the name of the PostgreSQL version it
/// came from, if it is on this machine: `QW_PG_REGRESS_SQL`, else the
/// cache's copy of `version` (`None`: the newest there).
fn regress_sql(version: Option<&str>) -> Option<(PathBuf, String)> {
    if let Some(dir) = std::env::var_os("QW_PG_REGRESS_SQL") {
        let dir = PathBuf::from(dir);
        let version = version_of(&dir);
        return Some((dir, version));
    }
    let mut caches = vec![PathBuf::from("/var/cache/queenwire/pg_regress")];
    if let Some(home) = std::env::var_os("HOME") {
        caches.push(Path::new(&home).join(".cache/queenwire/pg_regress"));
    }
    for cache in caches {
        let Ok(entries) = std::fs::read_dir(&cache) else {
            continue;
        };
        let mut dirs: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path().join("regress/sql"))
            .filter(|d| d.is_dir() && version.is_none_or(|v| version_of(d) == v))
            .collect();
        dirs.sort();
        if let Some(dir) = dirs.pop() {
            let version = version_of(&dir);
            return Some((dir, version));
        }
    }
    None
}

/// `…/<version>/regress/sql` → `<version>`.
fn version_of(sql_dir: &Path) -> String {
    sql_dir
        .ancestors()
        .nth(2)
        .and_then(|d| d.file_name())
        .map_or("unknown".into(), |n| n.to_string_lossy().into_owned())
}

/// A file's SQL as psql sends it: without psql's own backslash commands
/// and without the data lines of `COPY … FROM stdin` (up to `\.`).
fn sql_of(file: &str) -> String {
    let mut sql = String::with_capacity(file.len());
    let mut copy_data = false;
    for line in file.lines() {
        if copy_data {
            copy_data = line != "\\.";
            continue;
        }
        if line.trim_start().starts_with('\\') {
            continue;
        }
        let lower = line.to_ascii_lowercase();
        copy_data = lower.contains("from stdin") && lower.contains(';');
        sql.push_str(line);
        sql.push('\n');
    }
    sql
}

/// FNV-1a, 64 bits: a stable digest of where the statements lie.
fn digest(ranges: &[std::ops::Range<usize>]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for r in ranges {
        for b in (r.start as u64)
            .to_le_bytes()
            .into_iter()
            .chain((r.end as u64).to_le_bytes())
        {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// The record of one source: per file (sorted), a header line
/// `file statements digest`, then a line `n token…` for each statement
/// some pass says something of.
fn record_of(dir: &Path, version: &str) -> String {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("the regression suite's sql directory")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "sql"))
        .collect();
    files.sort();
    let mut out = header(version);
    out.push('\n');
    for path in files {
        let bytes = std::fs::read(&path).expect("a regression SQL file");
        let sql = sql_of(&String::from_utf8_lossy(&bytes));
        let ranges = split::split_statements(&sql);
        let name = path.file_name().unwrap().to_string_lossy();
        out.push_str(&format!(
            "{name} {} {:016x}\n",
            ranges.len(),
            digest(&ranges)
        ));
        for (n, range) in ranges.iter().enumerate() {
            let statement = &sql[range.clone()];
            let tokens: Vec<String> = PASSES
                .iter()
                .filter_map(|(name, pass)| pass(statement).map(|v| format!("{name}:{v}")))
                .collect();
            if !tokens.is_empty() {
                out.push_str(&format!("{n}\t{}\n", tokens.join("\t")));
            }
        }
    }
    out
}

/// The record's first line, which names the sources' version.
fn header(version: &str) -> String {
    format!(
        "# PostgreSQL {version} regression suite: verdicts of the classification passes \
         (tests/classification.rs)"
    )
}

/// Today's record and the checked-in one (written first under
/// `QW_BLESS=1`, from the newest sources at hand); `None` without the
/// sources the record was made from.
fn records() -> Option<&'static (String, String)> {
    static RECORDS: OnceLock<Option<(String, String)>> = OnceLock::new();
    RECORDS
        .get_or_init(|| {
            let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(RECORD);
            let bless = std::env::var_os("QW_BLESS").is_some_and(|v| v == "1");
            let recorded = std::fs::read_to_string(&path).unwrap_or_default();
            let recorded_version = recorded.lines().next().and_then(|h| h.split(' ').nth(2));
            let wanted = if bless { None } else { recorded_version };
            let Some((dir, version)) = regress_sql(wanted) else {
                // CI runs these again after tests/pg_regress/run has
                // fetched the sources, and there their absence is a failure.
                assert!(
                    std::env::var_os("QW_CLASSIFICATION_REQUIRED").is_none(),
                    "QW_CLASSIFICATION_REQUIRED is set and the PostgreSQL {} regression \
                     sources are not on this machine",
                    wanted.unwrap_or("")
                );
                eprintln!(
                    "no PostgreSQL {} regression sources (tests/pg_regress/run fetches those \
                     of the installed server; or set QW_PG_REGRESS_SQL): classification \
                     verdicts not compared",
                    wanted.unwrap_or("")
                );
                return None;
            };
            let today = record_of(&dir, &version);
            if bless {
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(&path, &today).expect("write the record");
                return Some((today.clone(), today));
            }
            assert_eq!(
                recorded.lines().next(),
                today.lines().next(),
                "the record was made from other regression sources than QW_PG_REGRESS_SQL's"
            );
            Some((recorded, today))
        })
        .as_ref()
}

/// The record's lines for one pass (`None`: the split alone): file
/// headers, and that pass's verdict on each statement it has one for; by
/// file.
fn one_pass(record: &str, pass: Option<&str>) -> BTreeMap<String, Vec<String>> {
    let mut files: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut file = String::new();
    for line in record.lines().skip(1) {
        let mut tokens = line.split('\t');
        let first = tokens.next().unwrap_or("");
        if first.contains(".sql ") {
            file = first.split(' ').next().unwrap_or("").to_string();
            files
                .entry(file.clone())
                .or_default()
                .push(line.to_string());
            continue;
        }
        let Some(pass) = pass else { continue };
        let prefix = format!("{pass}:");
        if let Some(verdict) = tokens.find(|t| t.starts_with(&prefix)) {
            files
                .entry(file.clone())
                .or_default()
                .push(format!("{first} {verdict}"));
        }
    }
    files
}

/// Compares one pass's verdicts with the record; the files that differ,
/// with their differing lines, fail the test.
fn compare(pass: Option<&str>) {
    let Some((recorded, today)) = records() else {
        return;
    };
    let (want, got) = (one_pass(recorded, pass), one_pass(today, pass));
    let mut report = Vec::new();
    for file in want
        .keys()
        .chain(got.keys().filter(|f| !want.contains_key(*f)))
    {
        let (w, g) = (want.get(file), got.get(file));
        if w == g {
            continue;
        }
        let (w, g) = (
            w.cloned().unwrap_or_default(),
            g.cloned().unwrap_or_default(),
        );
        let only_w: Vec<&String> = w.iter().filter(|l| !g.contains(l)).take(5).collect();
        let only_g: Vec<&String> = g.iter().filter(|l| !w.contains(l)).take(5).collect();
        report.push(format!("{file}: recorded {only_w:?}, today {only_g:?}"));
    }
    assert!(
        report.is_empty(),
        "{} verdicts differ from the record in {} files (QW_BLESS=1 rewrites it once the change is meant):\n{}",
        pass.unwrap_or("split"),
        report.len(),
        report.join("\n")
    );
}

#[test]
fn the_split_puts_every_statement_where_it_did() {
    compare(None);
}

#[test]
fn the_dialect_recogniser_takes_the_statements_it_took() {
    compare(Some("dialect"));
}

#[test]
fn the_session_effect_probe_gives_every_statement_its_verdict() {
    compare(Some("effect"));
}

#[test]
fn deallocated_name_finds_the_names_it_found() {
    compare(Some("deallocate"));
}

#[test]
fn plain_begin_answers_ahead_what_it_did() {
    compare(Some("begin"));
}

#[test]
fn listening_serves_the_listens_it_served() {
    compare(Some("listening"));
}

#[test]
fn transaction_control_follows_the_statements_it_followed() {
    compare(Some("control"));
}

#[test]
fn settings_resets_and_sets_are_seen_as_before() {
    compare(Some("settings"));
}
