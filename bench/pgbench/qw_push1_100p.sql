-- queenwire: one message into a random one of 100 partitions (-M simple; -M prepared
-- takes qw_push1_100p_prepared.sql: pgbench makes :p a parameter there, and a
-- parameter cannot sit inside a string literal).
-- One transaction of a queenwire-bench pgbench cell (bench/src/pgbench.rs);
-- run it yourself with: pgbench -n -c 8 -j 2 -T 10 -M simple -f FILE
\set p random(1, 100)
PUSH INTO pgb_push PARTITION 'p:p' VALUES ('{"seq": 1, "event": "order.created", "customer": "cus_4f2a9c81d3e7", "sku": "SKU-00421337", "qty": 3, "amount_cents": 129900, "currency": "EUR", "note": "gift wrap leave at door ring bell fragile ex"}');
