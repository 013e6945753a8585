// A job queue on queenwire with plain JDBC (pgjdbc): one shared queue, W workers.
//
// Pushes N jobs into a queue, then runs W worker threads, each with its own
// connection, that POP one job at a time, do it and ACK it. The queue is
// created with ordered = false (a shared queue): each message is leased on
// its own, so the workers run in parallel on one queue without partitions.
// Every job whose number is a multiple of --fail-every fails on its first
// attempt and is answered with ACK ... FAILED: queenwire hands it out again
// after the queue's retry_delay, with retry_count + 1, and then it succeeds.
//
//   java -cp /usr/share/java/postgresql.jar Jobs.java
//        [--url postgresql://me@127.0.0.1:6543/jobs] [--queue jobs]
//        [--jobs 200] [--workers 4] [--fail-every 7] [--work-ms 20]
//
// The URL (postgresql://user@host:port/db, or a jdbc:postgresql: URL) may
// also come from QW_URL; QW_EXAMPLE_QUEUE_OPTIONS replaces the queue's WITH
// list (default: ordered = false, retry_delay = '100ms').
// Ctrl-C or SIGTERM stops the workers gracefully: each finishes and ACKs the
// job in hand. --jobs 0 pushes nothing and works the queue until stopped.
// Exit status 0 when every job this run pushed was acknowledged exactly once.

import java.net.URI;
import java.sql.*;
import java.util.*;
import java.util.concurrent.CountDownLatch;
import java.util.regex.*;

public class Jobs {
    static final String QUEUE_OPTIONS = Objects.requireNonNullElse(
            System.getenv("QW_EXAMPLE_QUEUE_OPTIONS"), "ordered = false, retry_delay = '100ms'");
    static final int PUSH_BATCH = 100;
    // The payload is {"run": "...", "job": n}; two patterns spare a JSON library.
    static final Pattern JOB = Pattern.compile("\"job\"\\s*:\\s*(\\d+)");
    static final Pattern RUN = Pattern.compile("\"run\"\\s*:\\s*\"([^\"]*)\"");

    static String url, queue, run;
    static int jobs, workers, failEvery, workMs;
    static volatile boolean stopping;

    /** What happened to this run's jobs: a job is done when its ACK says 'acked'. */
    static class Ledger {
        final Map<Integer, Integer> acked = new TreeMap<>(); // job number -> ACKs that answered 'acked'
        final Set<Integer> dead = new TreeSet<>();           // job numbers dead-lettered
        final int[] byWorker = new int[workers];
        int retried, stale, others;

        synchronized void record(int worker, String payload, String status) {
            Matcher r = RUN.matcher(payload), j = JOB.matcher(payload);
            boolean ours = r.find() && r.group(1).equals(run) && j.find();
            if (status.equals("retry")) retried++;
            else if (status.equals("stale")) stale++;       // the lease was lost: the job comes back
            else if (!ours) others++;                       // left in the queue by an earlier run
            else if (status.equals("dead_lettered")) dead.add(Integer.parseInt(j.group(1)));
            else if (status.equals("acked")) {
                acked.merge(Integer.parseInt(j.group(1)), 1, Integer::sum);
                byWorker[worker - 1]++;
            }
            if (jobs > 0 && acked.size() + dead.size() >= jobs) stopping = true; // every job finished
        }
    }
    static Ledger ledger;

    static void doJob(long job, int retryCount) throws Exception {
        Thread.sleep(workMs);
        if (failEvery > 0 && job % failEvery == 0 && retryCount == 0) {
            throw new Exception("job " + job + ": failed on its first attempt");
        }
    }

    static Connection connect() throws SQLException {
        if (url.startsWith("jdbc:")) return DriverManager.getConnection(url);
        URI u = URI.create(url); // postgresql://user[:password]@host[:port]/db
        Properties props = new Properties();
        if (u.getUserInfo() != null) {
            String[] userInfo = u.getUserInfo().split(":", 2);
            props.setProperty("user", userInfo[0]);
            if (userInfo.length > 1) props.setProperty("password", userInfo[1]);
        }
        int port = u.getPort() < 0 ? 5432 : u.getPort();
        return DriverManager.getConnection("jdbc:postgresql://" + u.getHost() + ":" + port + u.getPath(), props);
    }

    static void pushJobs(Connection conn) throws SQLException {
        for (int first = 1; first <= jobs; first += PUSH_BATCH) {
            int count = Math.min(PUSH_BATCH, jobs - first + 1);
            String values = String.join(", ", Collections.nCopies(count, "(?)"));
            try (PreparedStatement push = conn.prepareStatement("PUSH INTO " + queue + " VALUES " + values)) {
                for (int i = 0; i < count; i++) {
                    push.setString(i + 1, "{\"run\": \"" + run + "\", \"job\": " + (first + i) + "}");
                }
                int queued = 0;
                try (ResultSet rs = push.executeQuery()) {
                    while (rs.next()) if (rs.getString("status").equals("queued")) queued++;
                }
                if (queued != count) {
                    throw new SQLException("PUSH queued " + queued + " of jobs " + first + ".." + (first + count - 1));
                }
            }
        }
    }

    static void worker(int number) {
        try (Connection conn = connect();
             Statement pop = conn.createStatement();
             PreparedStatement ack = conn.prepareStatement("ACK ?");
             PreparedStatement fail = conn.prepareStatement("ACK ? FAILED REASON ?")) {
            while (!stopping) {
                String receipt, payload;
                int retryCount;
                try (ResultSet rs = pop.executeQuery("POP FROM " + queue + " LIMIT 1 WAIT '1s'")) {
                    if (!rs.next()) continue;
                    receipt = rs.getString("receipt");
                    payload = rs.getString("payload");
                    retryCount = rs.getInt("retry_count");
                }
                Matcher job = JOB.matcher(payload);
                PreparedStatement answer = ack;
                try {
                    doJob(job.find() ? Long.parseLong(job.group(1)) : 0, retryCount);
                } catch (Exception e) { // any failure of the job: hand it back for a retry
                    answer = fail;
                    fail.setString(2, e.getMessage());
                }
                answer.setString(1, receipt);
                try (ResultSet rs = answer.executeQuery()) {
                    rs.next();
                    ledger.record(number, payload, rs.getString("status"));
                }
            }
        } catch (SQLException e) {
            System.out.println("worker " + number + " stopped: " + e.getMessage());
        }
    }

    /** Prints the summary; true when every job was acknowledged exactly once. */
    static boolean report(double elapsed) {
        List<Integer> twice = new ArrayList<>(), missing = new ArrayList<>();
        ledger.acked.forEach((job, n) -> { if (n > 1) twice.add(job); });
        for (int job = 1; job <= jobs; job++) if (!ledger.acked.containsKey(job)) missing.add(job);
        System.out.printf("jobs done: %d of %d, failures retried: %d, stale acks: %d, workers: %d, elapsed: %.1f s%n",
                ledger.acked.size(), jobs, ledger.retried, ledger.stale, workers, elapsed);
        StringJoiner perWorker = new StringJoiner(" ");
        for (int n : ledger.byWorker) perWorker.add(String.valueOf(n));
        System.out.println("done per worker: " + perWorker);
        if (ledger.others > 0) System.out.println("jobs of earlier runs done: " + ledger.others);
        if (!twice.isEmpty()) System.out.println("acknowledged more than once: " + twice);
        if (!ledger.dead.isEmpty()) System.out.println("dead-lettered: " + ledger.dead);
        if (!missing.isEmpty()) {
            System.out.println("not done (still in the queue): " + missing.size() + " jobs, first "
                    + missing.subList(0, Math.min(10, missing.size())));
        }
        return twice.isEmpty() && missing.isEmpty();
    }

    public static void main(String[] argv) throws Exception {
        Map<String, String> opts = new HashMap<>(Map.of(
                "--url", Objects.requireNonNullElse(System.getenv("QW_URL"), "postgresql://me@127.0.0.1:6543/jobs"),
                "--queue", "jobs", "--jobs", "200", "--workers", "4", "--fail-every", "7", "--work-ms", "20"));
        for (int i = 0; i < argv.length; i += 2) {
            if (!opts.containsKey(argv[i]) || i + 1 == argv.length) {
                System.err.println("usage: java Jobs.java [--url URL] [--queue Q] [--jobs N] [--workers W] "
                        + "[--fail-every K] [--work-ms MS]");
                System.exit(2);
            }
            opts.put(argv[i], argv[i + 1]);
        }
        url = opts.get("--url");
        queue = opts.get("--queue");
        jobs = Integer.parseInt(opts.get("--jobs"));
        workers = Integer.parseInt(opts.get("--workers"));
        failEvery = Integer.parseInt(opts.get("--fail-every"));
        workMs = Integer.parseInt(opts.get("--work-ms"));
        if (!queue.matches("[a-z_][a-z0-9_]*")) { // it is written into the SQL text
            System.err.println("--queue: a lower-case SQL identifier, please");
            System.exit(2);
        }
        run = String.format("%08x", new Random().nextInt()); // tells this run's jobs from any left in the queue before
        ledger = new Ledger();
        long started = System.nanoTime();

        // SIGINT and SIGTERM start the JVM's shutdown: the hook lets the workers
        // finish the job in hand and waits for the summary (main then halts with its status).
        CountDownLatch reported = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            stopping = true;
            try { reported.await(); } catch (InterruptedException ignored) { }
        }));

        try (Connection conn = connect(); Statement st = conn.createStatement()) {
            String withList = QUEUE_OPTIONS.isBlank() ? "" : " WITH (" + QUEUE_OPTIONS + ")";
            st.execute("CREATE QUEUE IF NOT EXISTS " + queue + withList);
            pushJobs(conn);
        } catch (SQLException e) {
            System.err.println("setting up " + queue + ": " + e.getMessage());
            reported.countDown();
            System.exit(1);
        }
        System.out.printf("pushed %d jobs into %s (run %s); %d workers start%n", jobs, queue, run, workers);

        List<Thread> threads = new ArrayList<>();
        for (int number = 1; number <= workers; number++) {
            int n = number;
            threads.add(new Thread(() -> worker(n), "worker-" + n));
        }
        threads.forEach(Thread::start);
        for (Thread t : threads) t.join();
        boolean ok = report((System.nanoTime() - started) / 1e9);
        System.out.flush();
        reported.countDown();
        // halt, not exit: exit would wait for the shutdown hook a signal may have started
        Runtime.getRuntime().halt(ok ? 0 : 1);
    }
}
