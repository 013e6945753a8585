"""Catalog traffic of BI tools, replayed through queenwire and, for
comparison, sent straight to the embedded PostgreSQL behind it: each answer
(column names, type OIDs, rows) must be the same.

The query texts follow what the tools send when listing schemas, tables and
columns (written here from their public sources, reformatted):

- Grafana's PostgreSQL data source (its query editor's schema, table and
  column pickers; postgresMetaQuery.ts). Sent without parameters over the
  simple query protocol, as Go's lib/pq does for parameterless queries.
- Metabase's PostgreSQL driver (database sync: describe-database, table
  privileges, describe-fields; metabase/driver/postgres.clj). Metabase runs
  them through pgjdbc with the schema and table names as parameters, so they
  are sent here over the extended protocol with $n parameters.
"""

import time

import psycopg

from compatlib import (DB, HOST, PG_DB, PG_PORT, PG_SOCKET_DIR, PG_USER, PORT, USER,
                       CheckFailed, Reporter, expect)

r = Reporter("bi-catalog")

# ---------------------------------------------------------------- Grafana ---
SEARCH_PATH_SCHEMAS = """
  quote_ident(table_schema) IN (
    SELECT CASE WHEN trim(s[i]) = '"$user"' THEN user ELSE trim(s[i]) END
    FROM generate_series(
           array_lower(string_to_array(current_setting('search_path'), ','), 1),
           array_upper(string_to_array(current_setting('search_path'), ','), 1)) AS i,
         string_to_array(current_setting('search_path'), ',') s)"""

GRAFANA_SYSTEM_SCHEMAS = """('information_schema', 'pg_catalog', '_timescaledb_cache',
  '_timescaledb_catalog', '_timescaledb_internal', '_timescaledb_config',
  'timescaledb_information', 'timescaledb_experimental')"""


def grafana_columns(table):
    lit = "'" + table.replace("'", "''") + "'"
    return f"""SELECT quote_ident(column_name) AS "column", data_type AS "type"
FROM information_schema.columns
WHERE CASE WHEN array_length(parse_ident({lit}), 1) = 2
        THEN quote_ident(table_schema) = (parse_ident({lit}))[1]
         AND quote_ident(table_name) = (parse_ident({lit}))[2]
        ELSE quote_ident(table_name) = {lit} AND {SEARCH_PATH_SCHEMAS}
      END"""


GRAFANA = [
    ("grafana_version", "SELECT current_setting('server_version_num')::int / 100 AS version"),
    ("grafana_timescaledb", "SELECT extversion FROM pg_extension WHERE extname = 'timescaledb'"),
    ("grafana_schemas", """SELECT schema_name AS "name" FROM information_schema.schemata
WHERE schema_name NOT IN ('information_schema', 'pg_catalog', 'pg_toast', '_timescaledb_cache',
  '_timescaledb_catalog', '_timescaledb_internal', '_timescaledb_config',
  'timescaledb_information', 'timescaledb_experimental')
ORDER BY schema_name"""),
    ("grafana_tables_in_schema", """SELECT quote_ident(table_name) AS "table"
FROM information_schema.tables WHERE quote_ident(table_schema) = 'queen' ORDER BY 1"""),
    ("grafana_tables_search_path", f"""SELECT CASE WHEN {SEARCH_PATH_SCHEMAS}
    THEN quote_ident(table_name)
    ELSE quote_ident(table_schema) || '.' || quote_ident(table_name) END AS "table"
FROM information_schema.tables
WHERE quote_ident(table_schema) NOT IN {GRAFANA_SYSTEM_SCHEMAS}
ORDER BY CASE WHEN {SEARCH_PATH_SCHEMAS} THEN 0 ELSE 1 END, 1"""),
    ("grafana_columns_qualified", grafana_columns("queen.queue_depth")),
    ("grafana_columns_unqualified", grafana_columns("queue_depth")),
]

# --------------------------------------------------------------- Metabase ---
METABASE_TABLES = """SELECT n.nspname AS "schema", c.relname AS "name",
  CASE c.relkind WHEN 'r' THEN 'TABLE' WHEN 'p' THEN 'PARTITIONED TABLE' WHEN 'v' THEN 'VIEW'
    WHEN 'f' THEN 'FOREIGN TABLE' WHEN 'm' THEN 'MATERIALIZED VIEW' ELSE NULL END AS "type",
  d.description AS "description", stat.n_live_tup AS "estimated_row_count"
FROM pg_catalog.pg_class AS c
INNER JOIN pg_catalog.pg_namespace AS n ON c.relnamespace = n.oid
LEFT JOIN pg_catalog.pg_description AS d
  ON c.oid = d.objoid AND d.objsubid = 0 AND d.classoid = 'pg_class'::regclass
LEFT JOIN pg_stat_user_tables AS stat ON n.nspname = stat.schemaname AND c.relname = stat.relname
WHERE c.relnamespace = n.oid AND n.nspname !~ '^pg_' AND n.nspname <> 'information_schema'
  AND c.relkind IN ('r', 'p', 'v', 'f', 'm') AND n.nspname IN ($1)
ORDER BY "type" ASC, "schema" ASC, "name" ASC"""

METABASE_PRIVILEGES = """WITH table_privileges AS (
  SELECT NULL AS role, t.schemaname AS schema, t.objectname AS table,
    pg_catalog.has_any_column_privilege(current_user,
      '"' || replace(t.schemaname, '"', '""') || '"."' || replace(t.objectname, '"', '""') || '"', 'update') AS update,
    pg_catalog.has_any_column_privilege(current_user,
      '"' || replace(t.schemaname, '"', '""') || '"."' || replace(t.objectname, '"', '""') || '"', 'select') AS select,
    pg_catalog.has_any_column_privilege(current_user,
      '"' || replace(t.schemaname, '"', '""') || '"."' || replace(t.objectname, '"', '""') || '"', 'insert') AS insert,
    pg_catalog.has_table_privilege(current_user,
      '"' || replace(t.schemaname, '"', '""') || '"."' || replace(t.objectname, '"', '""') || '"', 'delete') AS delete
  FROM (SELECT schemaname, tablename AS objectname FROM pg_catalog.pg_tables
        UNION SELECT schemaname, viewname AS objectname FROM pg_catalog.pg_views
        UNION SELECT schemaname, matviewname AS objectname FROM pg_catalog.pg_matviews) t
  WHERE t.schemaname !~ '^pg_' AND t.schemaname <> 'information_schema'
    AND pg_catalog.has_schema_privilege(current_user, t.schemaname, 'usage'))
SELECT t.* FROM table_privileges t ORDER BY t.schema, t.table"""

METABASE_FIELDS = """SELECT c.column_name AS "name",
  CASE WHEN c.udt_schema IN ('public', 'pg_catalog') THEN format('%s', c.udt_name)
       ELSE format('"%s"."%s"', c.udt_schema, c.udt_name) END AS "database-type",
  c.ordinal_position - 1 AS "database-position",
  c.table_schema AS "table-schema", c.table_name AS "table-name",
  pk.column_name IS NOT NULL AS "pk?",
  col_description(CAST(CAST(format('%I.%I', CAST(c.table_schema AS text), CAST(c.table_name AS text)) AS regclass) AS oid),
                  c.ordinal_position) AS "field-comment",
  ((column_default IS NULL) OR (lower(column_default) = 'null')) AND (is_nullable = 'NO')
    AND NOT (((column_default IS NOT NULL) AND (column_default LIKE '%nextval(%')) OR (is_identity <> 'NO'))
    AS "database-required",
  ((column_default IS NOT NULL) AND (column_default LIKE '%nextval(%')) OR (is_identity <> 'NO')
    AS "database-is-auto-increment"
FROM information_schema.columns AS c
LEFT JOIN (SELECT tc.table_schema, tc.table_name, kc.column_name
           FROM information_schema.table_constraints AS tc
           INNER JOIN information_schema.key_column_usage AS kc
             ON tc.constraint_name = kc.constraint_name AND tc.table_schema = kc.table_schema
            AND tc.table_name = kc.table_name
           WHERE tc.constraint_type = 'PRIMARY KEY') AS pk
  ON c.table_schema = pk.table_schema AND c.table_name = pk.table_name AND c.column_name = pk.column_name
WHERE c.table_schema !~ '^information_schema|catalog_history|pg_'
  AND c.table_schema IN ($1) AND c.table_name IN ($2, $3, $4)
UNION ALL
SELECT pa.attname AS "name",
  CASE WHEN ptn.nspname IN ('public', 'pg_catalog') THEN format('%s', pt.typname)
       ELSE format('"%s"."%s"', ptn.nspname, pt.typname) END AS "database-type",
  pa.attnum - 1 AS "database-position", pn.nspname AS "table-schema", pc.relname AS "table-name",
  FALSE AS "pk?", NULL AS "field-comment", FALSE AS "database-required",
  FALSE AS "database-is-auto-increment"
FROM pg_catalog.pg_class AS pc
INNER JOIN pg_catalog.pg_namespace AS pn ON pn.oid = pc.relnamespace
INNER JOIN pg_catalog.pg_attribute AS pa ON pa.attrelid = pc.oid
INNER JOIN pg_catalog.pg_type AS pt ON pt.oid = pa.atttypid
INNER JOIN pg_catalog.pg_namespace AS ptn ON ptn.oid = pt.typnamespace
WHERE pc.relkind = 'm' AND pa.attnum >= 1 AND pn.nspname IN ($5) AND pc.relname IN ($6, $7, $8)
ORDER BY "table-schema" ASC, "table-name" ASC, "database-position" ASC"""

METABASE_ENUMS = ("SELECT nspname, typname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace "
                  "WHERE t.oid IN (SELECT DISTINCT enumtypid FROM pg_enum e)")

VIEWS3 = ["queue_depth", "group_lag", "dlq_counts"]
METABASE = [
    ("metabase_timezone", "show timezone;", None),
    ("metabase_tables", METABASE_TABLES, ["queen"]),
    ("metabase_table_privileges", METABASE_PRIVILEGES, None),
    ("metabase_describe_fields", METABASE_FIELDS, ["queen"] + VIEWS3 + ["queen"] + VIEWS3),
    ("metabase_enum_types", METABASE_ENUMS, None),
]


def answer(conn, sql, params, simple):
    """(columns, rows) of one query, every value as PostgreSQL's text output."""
    if simple:
        # psycopg's client-side cursor without parameters: a simple Query message.
        cur = psycopg.ClientCursor(conn)
        cur.execute(sql)
        cols = [(d.name, d.type_code) for d in cur.description] if cur.description else []
        res = cur.pgresult
    else:
        # libpq's PQexecParams: Parse/Bind/Describe/Execute/Sync with the values
        # typed varchar, as pgjdbc binds Java strings by default.
        values = [p.encode() for p in (params or [])]
        res = conn.pgconn.exec_params(sql.encode(), values, [1043] * len(values))
        if res.status not in (psycopg.pq.ExecStatus.TUPLES_OK, psycopg.pq.ExecStatus.COMMAND_OK):
            msg = res.error_message.decode(errors="replace").strip()
            raise CheckFailed(f"error: {msg}")
        cols = [(res.fname(i).decode(), res.ftype(i)) for i in range(res.nfields)]
    rows = []
    for t in range(res.ntuples):
        row = []
        for i in range(res.nfields):
            v = res.get_value(t, i)
            row.append(None if v is None else bytes(v).decode())
        rows.append(tuple(row))
    return cols, rows


def compare(name, sql, params, simple, qw, pg, must_have=None):
    def run():
        for attempt in range(3):  # statistics columns may settle between the two runs
            a_cols, a_rows = answer(qw, sql, params, simple)
            b_cols, b_rows = answer(pg, sql, params, simple)
            if (a_cols, a_rows) == (b_cols, b_rows):
                break
            time.sleep(1)
        if a_cols != b_cols:
            raise CheckFailed(f"columns differ: queenwire {a_cols}, PostgreSQL {b_cols}")
        if a_rows != b_rows:
            only_a = [x for x in a_rows if x not in b_rows][:3]
            only_b = [x for x in b_rows if x not in a_rows][:3]
            raise CheckFailed(f"rows differ ({len(a_rows)} vs {len(b_rows)}): only through "
                              f"queenwire {only_a}, only direct {only_b}")
        if must_have:
            flat = {v for row in a_rows for v in row}
            expect(set(must_have) <= flat, f"answer lacks {sorted(set(must_have) - flat)}")
    r.check(name, run, needs=["connect"])


qw = r.check("connect", lambda: psycopg.connect(host=HOST, port=PORT, user=USER, dbname=DB,
                                                  connect_timeout=10, autocommit=True))
pg = None
if qw is not None:
    pg = r.check("connect_direct", lambda: psycopg.connect(
        host=PG_SOCKET_DIR, port=PG_PORT, user=PG_USER, dbname=PG_DB, connect_timeout=10,
        autocommit=True))
if qw is None or pg is None:
    raise SystemExit(0)

must = {"grafana_schemas": ["queen"], "grafana_tables_in_schema": VIEWS3,
        "grafana_columns_qualified": ["queue", "pending"],
        "metabase_tables": VIEWS3 + ["VIEW"], "metabase_table_privileges": VIEWS3,
        "metabase_describe_fields": ["queue", "pending", "consumer_group"]}
for name, sql in GRAFANA:
    compare(name, sql, None, True, qw, pg, must.get(name))
for name, sql, params in METABASE:
    compare(name, sql, params, False, qw, pg, must.get(name))
qw.close()
pg.close()
