//! Running statements through the proxy with the simple protocol and
//! reading rows as text, the way psql sees them.

use std::collections::HashMap;
use tokio_postgres::{Client, SimpleQueryMessage};

pub type Row = HashMap<String, Option<String>>;

/// Rows of a simple query as (column → text) maps; panics on an error.
pub async fn rows(client: &Client, sql: &str) -> Vec<Row> {
    let messages = client
        .simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    messages
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some(
                r.columns()
                    .iter()
                    .enumerate()
                    .map(|(i, c)| (c.name().to_string(), r.get(i).map(str::to_string)))
                    .collect(),
            ),
            _ => None,
        })
        .collect()
}

/// The `queen` tables the current transaction read 1,000 or more rows of
/// by sequential scan, with how many (a keyed call reads none).
pub async fn sequential_reads(client: &Client) -> Vec<(String, i64)> {
    tables_reading(client, "seq_tup_read").await
}

/// The `queen` tables the current transaction read 1,000 or more rows of,
/// by sequential scan or through an index, with how many.
pub async fn rows_read(client: &Client) -> Vec<(String, i64)> {
    tables_reading(client, "seq_tup_read + COALESCE(idx_tup_fetch, 0)").await
}

/// The `queen` tables whose `count` (an expression over the columns of
/// pg_stat_xact_user_tables) reached 1,000 in the current transaction.
async fn tables_reading(client: &Client, count: &str) -> Vec<(String, i64)> {
    client
        .query(
            &format!(
                "SELECT relname::TEXT, {count} FROM pg_stat_xact_user_tables \
                 WHERE schemaname = 'queen' AND {count} >= 1000 ORDER BY 1"
            ),
            &[],
        )
        .await
        .expect("pg_stat_xact_user_tables")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

/// Consumer rows holding a lease, read straight from the database.
pub async fn leases_held(direct: &Client) -> i64 {
    direct
        .query_one(
            "SELECT count(*) FROM queen.log_consumers WHERE lease_token IS NOT NULL",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}
