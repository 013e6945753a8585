//! Each dialect statement's typed `queen.*` calls (`crate::calls`), built
//! from the parsed statement and its bound parameters: names checked,
//! durations in the units the procedures take, options and KV batches as
//! the JSON the procedures read. Pure functions; the engine runs what they
//! build.

pub mod admin;
pub mod kv;
pub mod pop;
pub mod timers;

#[cfg(test)]
mod tests {
    use crate::calls::{groups, show, status};
    use crate::rewrite::dialect;

    /// The readers' columns are the statements' own, in order, by type
    /// (SHOW QUEUES' last column, `storage`, is the engine's: 030).
    #[test]
    fn show_readers_columns_match_the_statements_columns_by_type() {
        let statements = &dialect::show::QUEUES_COLUMNS;
        let queues = &statements[..statements.len() - 1];
        assert_eq!(statements.last().map(|c| c.name), Some("storage"));
        for (spec, statement) in [
            (&show::QUEUES, queues),
            (&show::PARTITIONS, dialect::show::PARTITIONS_COLUMNS),
            (&show::GROUPS, dialect::show::GROUPS_COLUMNS),
            (&groups::DETAIL, dialect::groups::GROUP_COLUMNS),
            (&groups::LAGGING, dialect::groups::LAGGING_COLUMNS),
        ] {
            let types: Vec<u32> = spec.columns.iter().map(|c| c.ty.oid()).collect();
            let expected: Vec<u32> = statement.iter().map(|c| c.type_oid).collect();
            assert_eq!(types, expected, "{}", spec.name);
        }
        assert_eq!(show::DLQ.columns[0].ty.oid(), dialect::oid::INT8);
    }

    #[test]
    fn the_status_readers_columns_match_the_statements_columns() {
        let ours: Vec<(&str, u32)> = status::STATUS
            .columns
            .iter()
            .map(|c| (c.name, c.ty.oid()))
            .collect();
        let statement: Vec<(&str, u32)> = dialect::status::COLUMNS
            .iter()
            .map(|c| (c.name, c.type_oid))
            .collect();
        assert_eq!(ours, statement);
    }
}
