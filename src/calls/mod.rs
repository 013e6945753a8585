//! Typed calls of the `queen.*` procedures: what the engine sends to
//! PostgreSQL for each dialect statement and each background task.
//!
//! A call is declared once, in its family's `calls!` block (`declare.rs`):
//! the procedure, its arguments with their Rust and PostgreSQL types, its
//! result columns with theirs. From that come
//!
//! - a [`CallSpec`]: the name of the statement prepared on each backend
//!   connection, its one-line SQL, its parameter types and its result
//!   columns (name and type) — exactly what Parse and Describe of that SQL
//!   report against the applied schema (`tests/calls.rs` proves it for every
//!   spec in [`ALL`], which gathers each family's `SPECS`);
//! - a parameter struct implementing [`Call`] (written by hand beside the
//!   block when its values come from another struct), which
//!   `rewrite::build` fills from a parsed statement and its bound
//!   parameters;
//! - a row struct implementing [`FromRow`], decoded by column name (written
//!   by hand when decoding is more than reading each column).
//!
//! The SQL names every argument (`p_queue => $1`), so that a renamed
//! argument fails Parse in that test rather than silently shifting values.
//! Nothing here does I/O: the engine executes calls
//! (`crate::backend::call`), and builds no SQL text of its own.
//!
//! This module sits below every layer that names a call (rewrite, engine,
//! backend, metrics) and imports none of them: it knows the procedures,
//! not the statements.
//!
//! | calls                                          | module          |
//! |------------------------------------------------|-----------------|
//! | push, pop, ack, renew, the hot list's seed     | [`queues`]      |
//! | the wildcard POP's queues of a namespace       | [`namespace`]   |
//! | configure, delete queue, seek and drop group   | [`admin`]       |
//! | the ephemeral class: declare, own, commit      | [`ephemeral`]   |
//! | SHOW QUEUES/PARTITIONS/GROUPS/DLQ              | [`show`]        |
//! | SHOW MESSAGES / MESSAGE / TRACE, REPLAY DLQ    | [`messages`]    |
//! | SHOW GROUP, SHOW LAGGING PARTITIONS            | [`groups`]      |
//! | SHOW STATUS                                    | [`status`]      |
//! | the KV batch                                   | [`kv`]          |
//! | timers, and the fire loop's claim and delete   | [`timers`]      |
//! | background tasks: quotas, leases, sweeps, wake | [`maintenance`] |
//! | retention and partition cleanup                | [`retention`]   |
//! | `/metrics` gauges and `/ready`                 | [`metrics`]     |
//! | transaction control, `queen.raise_v1`          | [`transaction`] |

pub mod acks;
pub mod admin;
mod declare;
pub mod ephemeral;
pub mod groups;
pub mod kv;
pub mod maintenance;
pub mod messages;
pub mod metrics;
pub mod namespace;
pub mod purge;
pub mod push_many;
pub mod queues;
pub mod retention;
mod row;
pub mod show;
pub mod status;
pub mod stream_cycle;
pub mod streams;
pub mod timers;
pub mod transaction;

pub use row::{DecodeError, FromRow, Jsonb, RawRow, Row};
use tokio_postgres::types::{ToSql, Type};

/// One statement the proxy prepares on a backend connection.
#[derive(Debug)]
pub struct CallSpec {
    /// The prepared statement's name (Parse happens once per connection).
    pub name: &'static str,
    /// One line: a call of one `queen.*` function.
    pub sql: &'static str,
    /// The types of `$1`, `$2`, … as sent in Parse.
    pub params: &'static [Type],
    /// The result columns, as RowDescription reports them.
    pub columns: &'static [ResultColumn],
}

/// One result column of a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResultColumn {
    pub name: &'static str,
    pub ty: Type,
}

/// Shorthand for the column lists of the specs.
pub const fn column(name: &'static str, ty: Type) -> ResultColumn {
    ResultColumn { name, ty }
}

impl CallSpec {
    /// The index of a result column, by name.
    pub fn column_index(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name == name)
    }
}

/// A call ready to run: its spec, its parameter values in `$n` order, and
/// the type its rows decode into.
pub trait Call {
    const SPEC: &'static CallSpec;
    type Row: FromRow;
    fn params(&self) -> Vec<&(dyn ToSql + Sync)>;
}

/// Every call the proxy makes, each family's `SPECS` (what its `calls!`
/// block declares) in turn; `tests/calls.rs` Parses and Describes each
/// against the applied schema.
pub const ALL: &[&CallSpec] = &flatten::<{ total(FAMILIES) }>(FAMILIES);

const FAMILIES: &[&[&CallSpec]] = &[
    groups::SPECS,
    show::SPECS,
    status::SPECS,
    metrics::SPECS,
    messages::SPECS,
    maintenance::SPECS,
    retention::SPECS,
    timers::SPECS,
    streams::SPECS,
    stream_cycle::SPECS,
    admin::SPECS,
    ephemeral::SPECS,
    kv::SPECS,
    namespace::SPECS,
    purge::SPECS,
    transaction::SPECS,
    queues::SPECS,
    push_many::SPECS,
    acks::SPECS,
];

/// How many specs the families hold together.
const fn total(families: &[&[&CallSpec]]) -> usize {
    let (mut n, mut i) = (0, 0);
    while i < families.len() {
        n += families[i].len();
        i += 1;
    }
    n
}

/// The families' specs in one array (`N` = [`total`]).
const fn flatten<const N: usize>(families: &[&[&'static CallSpec]]) -> [&'static CallSpec; N] {
    let mut all = [families[0][0]; N];
    let (mut n, mut i) = (0, 0);
    while i < families.len() {
        let mut j = 0;
        while j < families[i].len() {
            all[n] = families[i][j];
            n += 1;
            j += 1;
        }
        i += 1;
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn every_spec_has_a_unique_name_and_one_line_of_sql() {
        let mut names = HashSet::new();
        for spec in ALL {
            assert!(names.insert(spec.name), "{} twice", spec.name);
            assert!(spec.name.starts_with("qw_"), "{}", spec.name);
            assert!(!spec.sql.contains('\n'), "{}", spec.name);
        }
    }

    #[test]
    fn every_parameter_of_a_spec_appears_in_its_sql() {
        for spec in ALL {
            for n in 1..=spec.params.len() {
                assert!(spec.sql.contains(&format!("${n}")), "{}: ${n}", spec.name);
            }
            let beyond = format!("${}", spec.params.len() + 1);
            assert!(!spec.sql.contains(&beyond), "{}: {beyond}", spec.name);
        }
    }

    /// The prepared names written in the family files are those of `ALL`:
    /// a family left out of `FAMILIES`, or a spec written by hand outside
    /// the `calls!` blocks, fails here.
    #[test]
    fn every_call_the_family_files_declare_is_in_all() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/calls");
        let mut declared = HashSet::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path
                .file_name()
                .is_some_and(|n| n == "mod.rs" || n == "declare.rs")
            {
                continue;
            }
            let source = std::fs::read_to_string(&path).unwrap();
            let code = source.split("#[cfg(test)]").next().unwrap_or_default();
            for (at, _) in code.match_indices("\"qw_") {
                let name = code[at + 1..].split('"').next().unwrap_or_default();
                declared.insert(name.to_string());
            }
        }
        let all: HashSet<String> = ALL.iter().map(|s| s.name.to_string()).collect();
        let missing: Vec<_> = declared.difference(&all).collect();
        assert!(missing.is_empty(), "declared but not in ALL: {missing:?}");
        let unseen: Vec<_> = all.difference(&declared).collect();
        assert!(
            unseen.is_empty(),
            "in ALL but not found in a family file: {unseen:?}"
        );
    }

    #[test]
    fn every_result_column_is_named_once() {
        for spec in ALL {
            let mut seen = HashSet::new();
            for c in spec.columns {
                assert!(seen.insert(c.name), "{}: {} twice", spec.name, c.name);
            }
        }
    }
}
