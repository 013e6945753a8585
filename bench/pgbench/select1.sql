-- A statement queenwire passes to PostgreSQL unchanged.
-- One transaction of a queenwire-bench pgbench cell (bench/src/pgbench.rs);
-- run it yourself with: pgbench -n -c 8 -j 2 -T 10 -M simple -f FILE
SELECT 1;
