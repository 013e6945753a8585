-- pgmq: take and delete up to 100 messages.
-- One transaction of a queenwire-bench pgbench cell (bench/src/pgbench.rs);
-- run it yourself with: pgbench -n -c 8 -j 2 -T 10 -M simple -f FILE
SELECT * FROM pgmq.pop('pgb_pop', 100);
