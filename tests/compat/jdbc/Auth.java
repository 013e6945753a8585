// pgjdbc (Debian's libpostgresql-jdbc-java) against a queenwire started with
// --users (SCRAM-SHA-256), --tls-cert/--tls-key and --require-tls.
// One line per check: "ok pgjdbc auth_<check>" or "FAIL pgjdbc auth_<check>: why".
// Usage: java -cp /usr/share/java/postgresql.jar:. Auth HOST PORT
// Environment: QW_AUTH_USER, QW_AUTH_PASSWORD (a user of the users file, with
// passthrough full), QW_AUTH_TENANT (its tenant), QW_AUTH_CA (the server's
// self-signed certificate, CN=localhost).

import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.HashSet;
import java.util.Objects;
import java.util.Properties;
import java.util.Set;

public class Auth {
    static final String CLIENT = "pgjdbc";
    static final String QUEUE = "authq_pgjdbc";

    static String host;
    static int port;
    static String user;
    static String password;
    static String tenant;
    static String ca;
    static final Set<String> failed = new HashSet<>();

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

    static void check(String name, Body body, String... needs) {
        for (String n : needs) {
            if (failed.contains(n)) {
                fail(name, "not run: " + n + " failed");
                return;
            }
        }
        try {
            body.run();
        } catch (CheckFailed e) {
            fail(name, e.getMessage());
            return;
        } catch (SQLException e) {
            fail(name, e.getClass().getName() + " SQLSTATE " + e.getSQLState() + " " + e.getMessage());
            return;
        } catch (Throwable e) {
            fail(name, e.toString());
            return;
        }
        System.out.println("ok " + CLIENT + " " + name);
        System.out.flush();
    }

    static void fail(String name, String why) {
        failed.add(name);
        System.out.println("FAIL " + CLIENT + " " + name + ": " + oneLine(why));
        System.out.flush();
    }

    static Properties props(String u, String pw, String sslmode) {
        Properties p = new Properties();
        p.setProperty("user", u);
        p.setProperty("password", pw);
        p.setProperty("sslmode", sslmode);
        p.setProperty("connectTimeout", "10");
        p.setProperty("socketTimeout", "60");
        p.setProperty("loginTimeout", "20");
        return p;
    }

    static Connection connect(String h, Properties p) throws SQLException {
        return DriverManager.getConnection("jdbc:postgresql://" + h + ":" + port + "/compat", p);
    }

    // The login must be refused with this SQLSTATE (and a message containing `text`).
    static void expectRefused(Properties p, String sqlstate, String text) throws Exception {
        Connection c;
        try {
            c = connect(host, p);
        } catch (SQLException e) {
            expectEq(e.getSQLState(), sqlstate, "SQLSTATE (message: " + e.getMessage() + ")");
            expect(String.valueOf(e.getMessage()).contains(text),
                "message " + e.getMessage() + " does not contain \"" + text + "\"");
            return;
        }
        c.close();
        throw new CheckFailed("the login succeeded; want SQLSTATE " + sqlstate);
    }

    static Connection conn;

    public static void main(String[] args) throws Exception {
        host = args[0];
        port = Integer.parseInt(args[1]);
        user = System.getenv("QW_AUTH_USER");
        password = System.getenv("QW_AUTH_PASSWORD");
        tenant = System.getenv("QW_AUTH_TENANT");
        ca = System.getenv("QW_AUTH_CA");
        Class.forName("org.postgresql.Driver");

        // sslmode=require: pgjdbc fails the connection if the server declines
        // TLS, so a login here is a SCRAM exchange inside TLS.
        check("auth_scram_tls_login", () -> {
            conn = connect(host, props(user, password, "require"));
            conn.setAutoCommit(true);
        });
        check("auth_select_1", () -> {
            try (Statement s = conn.createStatement(); ResultSet rs = s.executeQuery("SELECT 1")) {
                expect(rs.next(), "a row");
                expectEq(rs.getInt(1), 1, "SELECT 1");
                expect(!rs.next(), "one row");
            }
        }, "auth_scram_tls_login");
        check("auth_dialect_push_pop", () -> {
            try (Statement s = conn.createStatement()) {
                try (ResultSet rs = s.executeQuery("PUSH INTO " + QUEUE + " VALUES ('{\"a\":1}')")) {
                    expect(rs.next(), "a PUSH row");
                    expectEq(rs.getString("queue"), QUEUE, "queue");
                    expectEq(rs.getString("status"), "queued", "status");
                    expect(!rs.next(), "one PUSH row");
                }
                String receipt;
                try (ResultSet rs = s.executeQuery("POP FROM " + QUEUE)) {
                    expect(rs.next(), "a POP row");
                    expectEq(rs.getString("payload").replace(" ", ""), "{\"a\":1}", "payload");
                    receipt = rs.getString("receipt");
                    expect(!rs.next(), "one POP row");
                }
                try (ResultSet rs = s.executeQuery("ACK '" + receipt + "'")) {
                    expect(rs.next(), "an ACK row");
                    expectEq(rs.getString("status"), "acked", "ACK status");
                }
            }
        }, "auth_scram_tls_login");
        // A PUSH that has been answered is committed: a plain SELECT right
        // after it (plain SQL runs on the tenant's backend role, the PUSH on
        // queenwire's own connection) sees the message.
        check("auth_push_visible_at_once", () -> {
            String q = QUEUE + "_vis";
            try (Statement s = conn.createStatement()) {
                try (ResultSet rs = s.executeQuery("PUSH INTO " + q + " VALUES ('{\"b\":2}')")) {
                    expect(rs.next(), "a PUSH row");
                    expectEq(rs.getString("status"), "queued", "status");
                }
                try (ResultSet rs = s.executeQuery(
                         "SELECT messages FROM queen.queue_depth WHERE queue = '" + q + "'")) {
                    expect(rs.next(), "no queen.queue_depth row for " + q + " right after its PUSH was answered");
                    expectEq(rs.getLong(1), 1L, "messages");
                }
            }
        }, "auth_dialect_push_pop");
        // The queue was created in the tenant of the users file's entry (waits up
        // to 5 s for the row, so that this check is about the tenant only).
        check("auth_tenant_of_user", () -> {
            String sql = "SELECT tenant_id::text FROM queen.queue_depth WHERE queue = '" + QUEUE + "'";
            long deadline = System.nanoTime() + 5_000_000_000L;
            while (true) {
                try (Statement s = conn.createStatement(); ResultSet rs = s.executeQuery(sql)) {
                    if (rs.next()) {
                        expectEq(rs.getString(1), tenant, "tenant_id");
                        expect(!rs.next(), "one queen.queue_depth row for " + QUEUE);
                        return;
                    }
                }
                expect(System.nanoTime() < deadline, "no queen.queue_depth row for " + QUEUE + " within 5 s");
                Thread.sleep(50);
            }
        }, "auth_dialect_push_pop");
        if (conn != null) {
            try { conn.close(); } catch (SQLException ignored) { }
        }
        // verify-full against the self-signed certificate: queenwire serves the
        // --tls-cert it was given, and pgjdbc checks the name localhost.
        check("auth_tls_verify_full", () -> {
            Properties p = props(user, password, "verify-full");
            p.setProperty("sslrootcert", ca);
            try (Connection c = connect("localhost", p);
                 Statement s = c.createStatement();
                 ResultSet rs = s.executeQuery("SELECT 1")) {
                expect(rs.next(), "a row");
                expectEq(rs.getInt(1), 1, "SELECT 1");
            }
        });
        check("auth_wrong_password_28P01", () ->
            expectRefused(props(user, password + "-wrong", "require"), "28P01",
                "password authentication failed"));
        check("auth_unknown_user_28P01", () ->
            expectRefused(props("compat_auth_nobody", password, "require"), "28P01",
                "password authentication failed"));
        // --require-tls: a plaintext login (sslmode=disable) is refused.
        check("auth_plaintext_refused_28000", () ->
            expectRefused(props(user, password, "disable"), "28000", "requires TLS"));
        System.exit(0);
    }
}
