// pgjdbc (Debian's libpostgresql-jdbc-java) against queenwire.
// One line per check: "ok pgjdbc <check>" or "FAIL pgjdbc <check>: why".
// Usage: java -cp /usr/share/java/postgresql.jar:. Compat HOST PORT

import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.SQLException;
import java.sql.Statement;
import java.sql.Types;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Objects;
import java.util.Properties;
import java.util.Set;

public class Compat {
    static final String CLIENT = "pgjdbc";
    static final String[][] PUSH_COLUMNS = {
        {"message_id", "uuid"}, {"queue", "text"}, {"partition", "text"}, {"offset", "int8"},
        {"transaction_id", "text"}, {"status", "text"}};
    static final String[][] POP_COLUMNS = {
        {"receipt", "text"}, {"message_id", "uuid"}, {"queue", "text"}, {"partition", "text"},
        {"offset", "int8"}, {"payload", "jsonb"}, {"transaction_id", "text"}, {"trace_id", "text"},
        {"retry_count", "int4"}, {"created_at", "timestamptz"}, {"lease_expires_at", "timestamptz"}};
    static final String[][] ACK_COLUMNS = {{"receipt", "text"}, {"status", "text"}};
    static final List<String> QUEUE_DEPTH_COLUMNS = Arrays.asList(
        "tenant_id", "queue", "partitions", "messages", "pending", "dead_lettered", "created_at");

    static String host;
    static int port;
    static final Set<String> failed = new HashSet<>();
    static int failures = 0;

    interface Body { void run() throws Exception; }

    static class CheckFailed extends Exception {
        CheckFailed(String m) { super(m); }
    }

    static void expect(boolean cond, String why) throws CheckFailed {
        if (!cond) throw new CheckFailed(why);
    }

    static void expectEq(Object got, Object want, String what) throws CheckFailed {
        if (!Objects.equals(got, want)) throw new CheckFailed(what + ": got " + got + ", want " + want);
    }

    static String oneLine(String s) {
        s = String.valueOf(s).replaceAll("\\s+", " ").trim();
        return s.length() > 400 ? s.substring(0, 397) + "..." : s;
    }

    static boolean check(String name, Body body, String... needs) {
        for (String n : needs) {
            if (failed.contains(n)) {
                fail(name, "not run: " + n + " failed");
                return false;
            }
        }
        try {
            body.run();
        } catch (CheckFailed e) {
            fail(name, e.getMessage());
            return false;
        } catch (SQLException e) {
            fail(name, e.getClass().getName() + " SQLSTATE " + e.getSQLState() + " " + e.getMessage());
            return false;
        } catch (Throwable e) {
            fail(name, e.toString());
            return false;
        }
        System.out.println("ok " + CLIENT + " " + name);
        System.out.flush();
        return true;
    }

    static void fail(String name, String why) {
        failed.add(name);
        failures++;
        System.out.println("FAIL " + CLIENT + " " + name + ": " + oneLine(why));
        System.out.flush();
    }

    static Connection connect(String extra) throws SQLException {
        Properties p = new Properties();
        p.setProperty("user", "compat");
        p.setProperty("connectTimeout", "10");
        p.setProperty("socketTimeout", "60");
        p.setProperty("sslmode", "disable");
        String url = "jdbc:postgresql://" + host + ":" + port + "/compat" + (extra.isEmpty() ? "" : "?" + extra);
        return DriverManager.getConnection(url, p);
    }

    static List<String[]> columnsOf(ResultSetMetaData md) throws SQLException {
        List<String[]> out = new ArrayList<>();
        for (int i = 1; i <= md.getColumnCount(); i++) {
            out.add(new String[] {md.getColumnName(i), md.getColumnTypeName(i)});
        }
        return out;
    }

    static void expectColumns(ResultSetMetaData md, String[][] want, String what) throws Exception {
        List<String[]> got = columnsOf(md);
        StringBuilder g = new StringBuilder();
        for (String[] c : got) g.append(c[0]).append(' ').append(c[1]).append(", ");
        StringBuilder w = new StringBuilder();
        for (String[] c : want) w.append(c[0]).append(' ').append(c[1]).append(", ");
        expectEq(g.toString(), w.toString(), what);
        for (int i = 1; i <= md.getColumnCount(); i++) {
            expectEq(md.getColumnLabel(i), want[i - 1][0], what + " label " + i);
        }
    }

    static List<String> queueState(Connection c, String... queues) throws SQLException {
        List<String> out = new ArrayList<>();
        try (PreparedStatement ps = c.prepareStatement(
                "SELECT queue, partitions, messages, pending, dead_lettered FROM queen.queue_depth "
                + "WHERE queue = ANY(?) ORDER BY queue")) {
            ps.setArray(1, c.createArrayOf("text", queues));
            try (ResultSet rs = ps.executeQuery()) {
                while (rs.next()) {
                    out.add(rs.getString(1) + "/" + rs.getLong(2) + "/" + rs.getLong(3) + "/"
                            + rs.getLong(4) + "/" + rs.getLong(5));
                }
            }
        }
        return out;
    }

    /** Binds a JSON payload: setString with stringtype=unspecified, or setObject(Types.OTHER). */
    static void bindJson(PreparedStatement ps, int i, String json, boolean unspecified) throws SQLException {
        if (unspecified) ps.setString(i, json);
        else ps.setObject(i, json, Types.OTHER);
    }

    /** The checks every driver runs, for one connection configuration. */
    static void driverChecks(String mode, String extra, boolean unspecified, boolean extended) {
        final String p = mode + "_";
        final String q = "compat_jdbc_" + mode;
        final Connection[] box = new Connection[1];
        if (!check(p + "connect", () -> { box[0] = connect(extra); })) return;
        final Connection c = box[0];
        final List<String> ids = new ArrayList<>();
        final List<String> receipts = new ArrayList<>();

        check(p + "select_params", () -> {
            try (PreparedStatement ps = c.prepareStatement("SELECT ?::int + 1, ?::text, ?::jsonb ->> 'k'")) {
                ps.setInt(1, 41);
                ps.setString(2, "x");
                bindJson(ps, 3, "{\"k\": \"v\"}", unspecified);
                try (ResultSet rs = ps.executeQuery()) {
                    expect(rs.next(), "a row");
                    expectEq(rs.getInt(1), 42, "int");
                    expectEq(rs.getString(2), "x", "text");
                    expectEq(rs.getString(3), "v", "json");
                }
            }
        });

        check(p + "create_queue", () -> {
            try (Statement s = c.createStatement()) {
                expectEq(s.execute("CREATE QUEUE " + q), false, "CREATE QUEUE returns no result set");
            }
        });

        check(p + "push_json_param", () -> {
            try (PreparedStatement ps = c.prepareStatement("PUSH INTO ? VALUES (?), (?)")) {
                ps.setString(1, q);
                bindJson(ps, 2, "{\"n\": 1}", unspecified);
                bindJson(ps, 3, "{\"n\": 2}", unspecified);
                try (ResultSet rs = ps.executeQuery()) {
                    expectColumns(rs.getMetaData(), PUSH_COLUMNS, "PUSH columns");
                    while (rs.next()) {
                        expectEq(rs.getString("status"), "queued", "status");
                        expectEq(rs.getObject("message_id").getClass().getName(), "java.util.UUID", "message_id class");
                        ids.add(rs.getString("message_id"));
                    }
                }
                expectEq(ids.size(), 2, "rows");
            }
        }, p + "create_queue");

        check(p + "pop_limit", () -> {
            try (PreparedStatement ps = c.prepareStatement("POP FROM ? LIMIT ?")) {
                ps.setString(1, q);
                ps.setInt(2, 10);
                List<String> got = new ArrayList<>();
                List<String> payloads = new ArrayList<>();
                try (ResultSet rs = ps.executeQuery()) {
                    expectColumns(rs.getMetaData(), POP_COLUMNS, "POP columns");
                    while (rs.next()) {
                        receipts.add(rs.getString("receipt"));
                        got.add(rs.getString("message_id"));
                        payloads.add(rs.getString("payload"));
                        expect(rs.getTimestamp("lease_expires_at") != null, "lease_expires_at");
                        expectEq(rs.getInt("retry_count"), 0, "retry_count");
                    }
                }
                expectEq(got, ids, "message ids");
                expectEq(payloads, Arrays.asList("{\"n\": 1}", "{\"n\": 2}"), "payloads");
            }
        }, p + "push_json_param");

        check(p + "ack_receipt_params", () -> {
            try (PreparedStatement ps = c.prepareStatement("ACK ?, ?")) {
                ps.setString(1, receipts.get(0));
                ps.setString(2, receipts.get(1));
                List<String> st = new ArrayList<>();
                try (ResultSet rs = ps.executeQuery()) {
                    expectColumns(rs.getMetaData(), ACK_COLUMNS, "ACK columns");
                    while (rs.next()) st.add(rs.getString(1).equals(receipts.get(st.size())) + " " + rs.getString(2));
                }
                expectEq(st, Arrays.asList("true acked", "true acked"), "rows");
            }
        }, p + "pop_limit");

        check(p + "pop_again_empty", () -> {
            try (PreparedStatement ps = c.prepareStatement("POP FROM ? LIMIT ?")) {
                ps.setString(1, q);
                ps.setInt(2, 10);
                try (ResultSet rs = ps.executeQuery()) {
                    expect(!rs.next(), "no row");
                }
            }
        }, p + "ack_receipt_params");

        check(p + "dialect_error_sqlstate", () -> {
            try (PreparedStatement ps = c.prepareStatement("POP FROM ? LIMIT ?")) {
                ps.setString(1, q);
                ps.setInt(2, 0);
                ps.executeQuery().close();
                throw new CheckFailed("no exception for LIMIT 0");
            } catch (SQLException e) {
                expectEq(e.getSQLState(), "22023", "SQLState");
            }
        });

        check(p + "usable_after_error", () -> {
            try (PreparedStatement ps = c.prepareStatement("SELECT ?::int")) {
                ps.setInt(1, 7);
                try (ResultSet rs = ps.executeQuery()) {
                    expect(rs.next(), "a row");
                    expectEq(rs.getInt(1), 7, "value");
                }
            }
        });

        if (extended) check(p + "describe_before_execute", () -> {
            // getMetaData() on a PreparedStatement that has not run: a Describe.
            try (PreparedStatement ps = c.prepareStatement("POP FROM ? LIMIT ?")) {
                expectColumns(ps.getMetaData(), POP_COLUMNS, "POP columns");
                expectEq(ps.getParameterMetaData().getParameterTypeName(1), "text", "param 1");
                expectEq(ps.getParameterMetaData().getParameterTypeName(2), "int4", "param 2");
            }
            try (PreparedStatement ps = c.prepareStatement("PUSH INTO ? VALUES (?)")) {
                expectColumns(ps.getMetaData(), PUSH_COLUMNS, "PUSH columns");
                expectEq(ps.getParameterMetaData().getParameterTypeName(2), "jsonb", "payload param");
            }
            try (PreparedStatement ps = c.prepareStatement("ACK ?")) {
                expectColumns(ps.getMetaData(), ACK_COLUMNS, "ACK columns");
            }
        });

        check(p + "prepared_reuse", () -> {
            // Six executions of each statement: past prepareThreshold (5 by default)
            // pgjdbc switches to a named server-side statement.
            try (Statement s = c.createStatement()) { s.execute("CREATE QUEUE " + q + "_reuse"); }
            try (PreparedStatement push = c.prepareStatement("PUSH INTO ? VALUES (?)");
                 PreparedStatement pop = c.prepareStatement("POP FROM ? LIMIT ?");
                 PreparedStatement ack = c.prepareStatement("ACK ?")) {
                for (int i = 0; i < 7; i++) {
                    push.setString(1, q + "_reuse");
                    bindJson(push, 2, "{\"i\": " + i + "}", unspecified);
                    push.executeQuery().close();
                }
                List<String> got = new ArrayList<>();
                for (int i = 0; i < 8; i++) {
                    pop.setString(1, q + "_reuse");
                    pop.setInt(2, 1);
                    try (ResultSet rs = pop.executeQuery()) {
                        while (rs.next()) {
                            got.add(rs.getString("payload"));
                            ack.setString(1, rs.getString("receipt"));
                            try (ResultSet a = ack.executeQuery()) {
                                expect(a.next() && a.getString(2).equals("acked"), "acked");
                            }
                        }
                    }
                }
                expectEq(got.size(), 7, "messages popped: " + got);
                expectEq(got.get(6), "{\"i\": 6}", "last payload");
            }
        });

        final String qin = q + "_in";
        final String qout = q + "_out";
        check(p + "tx_rollback", () -> {
            String mid;
            try (Statement s = c.createStatement()) {
                s.execute("CREATE QUEUE " + qin);
                s.execute("CREATE QUEUE " + qout);
                try (ResultSet rs = s.executeQuery("PUSH INTO " + qin + " VALUES ('{\"job\": 1}')")) {
                    rs.next();
                    mid = rs.getString(1);
                }
            }
            List<String> before = queueState(c, qin, qout);
            c.setAutoCommit(false);
            try {
                txBody(c, qin, qout, unspecified);
                c.rollback();
            } finally {
                c.setAutoCommit(true);
            }
            expectEq(queueState(c, qin, qout), before, "queue_depth after rollback");
            try (PreparedStatement ps = c.prepareStatement("POP FROM ? LIMIT 5")) {
                ps.setString(1, qin);
                try (ResultSet rs = ps.executeQuery()) {
                    expect(rs.next(), "message back in the input queue");
                    expectEq(rs.getString("message_id"), mid, "message id");
                    expect(!rs.next(), "one message");
                }
                ps.setString(1, qout);
                try (ResultSet rs = ps.executeQuery()) {
                    expect(!rs.next(), "output queue empty");
                }
            }
        });

        check(p + "tx_commit", () -> {
            // The input message is leased by the POP of the previous check (60 s);
            // push a fresh one into a fresh input queue.
            String qin2 = qin + "2";
            try (Statement s = c.createStatement()) {
                s.execute("PUSH INTO " + qin2 + " VALUES ('{\"job\": 2}')");
            }
            List<String> before = queueState(c, qin2, qout);
            c.setAutoCommit(false);
            try {
                txBody(c, qin2, qout, unspecified);
                c.commit();
            } finally {
                c.setAutoCommit(true);
            }
            expectEq(queueState(c, qin2, qout), Arrays.asList(qin2 + "/1/1/0/0", qout + "/1/1/1/0"),
                     "queue_depth after commit (before: " + before + ")");
        }, p + "tx_rollback");

        if (extended) check(p + "fetch_size_portal", () -> {
            // Fetch size needs autocommit off: pgjdbc then runs a named portal and
            // fetches 3 rows per Execute (PortalSuspended in between).
            c.setAutoCommit(false);
            try (Statement s = c.createStatement()) {
                s.setFetchSize(3);
                long sum = 0;
                int n = 0;
                try (ResultSet rs = s.executeQuery("SELECT g FROM generate_series(1, 10) g")) {
                    while (rs.next()) { sum += rs.getLong(1); n++; }
                }
                expectEq(n, 10, "rows");
                expectEq(sum, 55L, "sum");
                // A queue statement with a fetch size: its rows come 2 per Execute too.
                s.execute("PUSH INTO " + q + " VALUES ('1'), ('2'), ('3'), ('4'), ('5')");
                List<String> pay = new ArrayList<>();
                List<String> rc = new ArrayList<>();
                try (PreparedStatement ps = c.prepareStatement("POP FROM ? LIMIT 5")) {
                    ps.setFetchSize(2);
                    ps.setString(1, q);
                    try (ResultSet rs = ps.executeQuery()) {
                        while (rs.next()) { pay.add(rs.getString("payload")); rc.add(rs.getString(1)); }
                    }
                }
                expectEq(pay, Arrays.asList("1", "2", "3", "4", "5"), "payloads through a portal");
                // And a queen view read 1 row at a time.
                try (PreparedStatement ps = c.prepareStatement(
                        "SELECT queue, messages FROM queen.queue_depth WHERE queue LIKE ? ORDER BY queue")) {
                    ps.setFetchSize(1);
                    ps.setString(1, q + "%");
                    int rows = 0;
                    try (ResultSet rs = ps.executeQuery()) { while (rs.next()) rows++; }
                    expect(rows >= 4, "view rows: " + rows);
                }
                try (PreparedStatement ack = c.prepareStatement("ACK ?, ?, ?, ?, ?")) {
                    for (int i = 0; i < 5; i++) ack.setString(i + 1, rc.get(i));
                    ack.executeQuery().close();
                }
                c.commit();
            } finally {
                c.setAutoCommit(true);
            }
        });

        try { c.close(); } catch (SQLException ignored) { }
    }

    static void txBody(Connection c, String qin, String qout, boolean unspecified) throws Exception {
        String receipt;
        try (PreparedStatement ps = c.prepareStatement("POP FROM ? LIMIT ?")) {
            ps.setString(1, qin);
            ps.setInt(2, 1);
            try (ResultSet rs = ps.executeQuery()) {
                expect(rs.next(), "POP in transaction returned a row");
                receipt = rs.getString("receipt");
            }
        }
        try (PreparedStatement ps = c.prepareStatement("PUSH INTO ? VALUES (?)")) {
            ps.setString(1, qout);
            bindJson(ps, 2, "{\"done\": true}", unspecified);
            ps.executeQuery().close();
        }
        try (PreparedStatement ps = c.prepareStatement("ACK ?")) {
            ps.setString(1, receipt);
            try (ResultSet rs = ps.executeQuery()) {
                expect(rs.next(), "ACK row");
                expectEq(rs.getString("status"), "acked", "ACK in transaction");
            }
        }
    }

    static void metadataChecks() {
        final Connection[] box = new Connection[1];
        if (!check("metadata_connect", () -> { box[0] = connect(""); })) return;
        Connection c = box[0];
        check("dbmeta_getTables_queen", () -> {
            DatabaseMetaData md = c.getMetaData();
            Set<String> views = new HashSet<>();
            try (ResultSet rs = md.getTables(null, "queen", "%", new String[] {"VIEW"})) {
                while (rs.next()) {
                    expectEq(rs.getString("TABLE_SCHEM"), "queen", "schema");
                    expectEq(rs.getString("TABLE_TYPE"), "VIEW", "type");
                    views.add(rs.getString("TABLE_NAME"));
                }
            }
            expect(views.containsAll(Arrays.asList("queue_depth", "group_lag", "dlq_counts")),
                   "views: " + views);
            Set<String> schemas = new HashSet<>();
            try (ResultSet rs = md.getSchemas()) {
                while (rs.next()) schemas.add(rs.getString("TABLE_SCHEM"));
            }
            expect(schemas.contains("queen"), "getSchemas has queen: " + schemas);
        });
        check("dbmeta_getColumns_queen", () -> {
            DatabaseMetaData md = c.getMetaData();
            List<String> cols = new ArrayList<>();
            List<String> types = new ArrayList<>();
            try (ResultSet rs = md.getColumns(null, "queen", "queue_depth", "%")) {
                while (rs.next()) {
                    cols.add(rs.getString("COLUMN_NAME"));
                    types.add(rs.getString("TYPE_NAME"));
                }
            }
            expectEq(cols, QUEUE_DEPTH_COLUMNS, "queue_depth columns");
            expectEq(types.get(1), "text", "queue type");
            expectEq(types.get(6), "timestamptz", "created_at type");
            List<String> lag = new ArrayList<>();
            try (ResultSet rs = md.getColumns(null, "queen", "group_lag", "%")) {
                while (rs.next()) lag.add(rs.getString("COLUMN_NAME"));
            }
            expectEq(lag, Arrays.asList("tenant_id", "queue", "consumer_group", "partitions", "lag",
                                        "oldest_pending_at", "leased_partitions"), "group_lag columns");
        });
        check("read_view", () -> {
            try (Statement s = c.createStatement();
                 ResultSet rs = s.executeQuery("SELECT * FROM queen.queue_depth ORDER BY queue")) {
                List<String> got = new ArrayList<>();
                for (int i = 1; i <= rs.getMetaData().getColumnCount(); i++) got.add(rs.getMetaData().getColumnName(i));
                expectEq(got, QUEUE_DEPTH_COLUMNS, "columns");
                int n = 0;
                while (rs.next()) n++;
                expect(n > 0, "rows");
            }
        });
        check("multi_statement_execute", () -> {
            // pgjdbc splits the text at ';' and sends each statement in its own
            // Parse/Bind/Execute, all before one Sync.
            try (Statement s = c.createStatement()) {
                s.execute("CREATE QUEUE compat_jdbc_multi");
                boolean isRs = s.execute("PUSH INTO compat_jdbc_multi VALUES ('{\"m\": 1}'); SELECT 5; "
                        + "POP FROM compat_jdbc_multi LIMIT 3");
                List<String> firsts = new ArrayList<>();
                for (int i = 0; i < 10; i++) {
                    if (isRs) {
                        try (ResultSet rs = s.getResultSet()) {
                            while (rs.next()) firsts.add(rs.getMetaData().getColumnName(1));
                        }
                    } else if (s.getUpdateCount() == -1) {
                        break;
                    }
                    isRs = s.getMoreResults();
                }
                expectEq(firsts, Arrays.asList("message_id", "?column?", "receipt"), "result sets");
            }
        });
        check("autosave_always_tx", () -> {
            // autosave=always: pgjdbc wraps each statement of a transaction in
            // SAVEPOINT PGJDBC_AUTOSAVE (sent in the same pipeline) and rolls back to
            // it after an error, so the transaction goes on.
            try (Connection c2 = connect("autosave=always");
                 Statement s = c2.createStatement()) {
                s.execute("PUSH INTO compat_jdbc_autosave VALUES ('{\"a\": 1}')");
                c2.setAutoCommit(false);
                String receipt;
                try (ResultSet rs = s.executeQuery("POP FROM compat_jdbc_autosave")) {
                    expect(rs.next(), "POP row");
                    receipt = rs.getString(1);
                }
                try {
                    s.executeQuery("POP FROM compat_jdbc_autosave LIMIT 0").close();
                    throw new CheckFailed("no exception for LIMIT 0");
                } catch (SQLException e) {
                    expectEq(e.getSQLState(), "22023", "SQLState");
                }
                s.execute("PUSH INTO compat_jdbc_autosave VALUES ('{\"a\": 2}')");
                try (ResultSet rs = s.executeQuery("ACK '" + receipt + "'")) {
                    expect(rs.next() && rs.getString(2).equals("acked"), "acked");
                }
                c2.commit();
                c2.setAutoCommit(true);
                try (ResultSet rs = s.executeQuery("POP FROM compat_jdbc_autosave LIMIT 5")) {
                    expect(rs.next(), "second message");
                    expectEq(rs.getString("payload"), "{\"a\": 2}", "payload after commit");
                    expect(!rs.next(), "one message");
                }
            }
        });
        check("query_timeout_cancels_pop_wait", () -> {
            // setQueryTimeout: pgjdbc sends a CancelRequest when the timer fires.
            try (Statement s = c.createStatement()) {
                s.execute("CREATE QUEUE compat_jdbc_wait");
                s.setQueryTimeout(1);
                long t0 = System.nanoTime();
                try {
                    s.executeQuery("POP FROM compat_jdbc_wait WAIT '20s'").close();
                    throw new CheckFailed("POP WAIT was not cancelled");
                } catch (SQLException e) {
                    expectEq(e.getSQLState(), "57014", "SQLState");
                }
                expect(System.nanoTime() - t0 < 10_000_000_000L, "cancelled within 10 s");
                s.setQueryTimeout(0);
                try (ResultSet rs = s.executeQuery("SELECT 1")) {
                    expect(rs.next() && rs.getInt(1) == 1, "usable after the cancel");
                }
            }
        });
        check("copy_manager_out_of_view", () -> {
            org.postgresql.copy.CopyManager cm = c.unwrap(org.postgresql.PGConnection.class).getCopyAPI();
            try (Statement s = c.createStatement()) {
                s.execute("PUSH INTO compat_jdbc_copy VALUES ('1'), ('2')");
            }
            java.io.StringWriter w = new java.io.StringWriter();
            long n = cm.copyOut("COPY (SELECT queue, messages FROM queen.queue_depth "
                    + "WHERE queue = 'compat_jdbc_copy') TO STDOUT WITH (FORMAT csv)", w);
            expectEq(n, 1L, "rows copied");
            expectEq(w.toString(), "compat_jdbc_copy,2\n", "COPY output");
        });
        check("current_schema_property", () -> {
            // currentSchema is sent as the search_path startup parameter; pgjdbc
            // documents it as one schema or several separated by commas.
            try (Connection c2 = connect("currentSchema=queen,public");
                 Statement s = c2.createStatement();
                 ResultSet rs = s.executeQuery("SELECT current_schemas(false)::text")) {
                expect(rs.next(), "a row");
                expectEq(rs.getString(1), "{queen,public}", "current_schemas(false)");
            }
        });
        try { c.close(); } catch (SQLException ignored) { }
    }

    public static void main(String[] args) throws Exception {
        host = args[0];
        port = Integer.parseInt(args[1]);
        Class.forName("org.postgresql.Driver");
        // Default prepareThreshold (5), JSON bound with setObject(..., Types.OTHER).
        driverChecks("default", "", false, true);
        // prepareThreshold=1: named server-side statements from the first execution;
        // stringtype=unspecified: setString is sent untyped, queenwire's Describe says jsonb.
        driverChecks("pt1", "prepareThreshold=1&stringtype=unspecified", true, true);
        // preferQueryMode=simple: pgjdbc inlines the parameters and sends simple Query
        // messages. pgjdbc 42.5.5 writes each value parenthesised, with a cast for
        // typed values: PUSH INTO ('q') VALUES (('{"n": 1}')), POP FROM ('q') LIMIT ('10'::int4).
        // No Describe and no portals in this mode, so those two checks are left out.
        driverChecks("simple", "preferQueryMode=simple&stringtype=unspecified", true, false);
        metadataChecks();
        System.exit(0);
    }
}
