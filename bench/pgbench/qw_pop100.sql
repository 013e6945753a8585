-- queenwire: take up to 100 messages and acknowledge them as they are sent
-- (the queue holds enough for every transaction of the run: pgbench -t).
-- One transaction of a queenwire-bench pgbench cell (bench/src/pgbench.rs);
-- run it yourself with: pgbench -n -c 8 -j 2 -T 10 -M simple -f FILE
POP FROM pgb_pop LIMIT 100 AUTO ACK;
