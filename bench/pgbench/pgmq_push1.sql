-- pgmq: one 200-byte message.
-- One transaction of a queenwire-bench pgbench cell (bench/src/pgbench.rs);
-- run it yourself with: pgbench -n -c 8 -j 2 -T 10 -M simple -f FILE
SELECT * FROM pgmq.send('pgb_push', '{"seq": 1, "event": "order.created", "customer": "cus_4f2a9c81d3e7", "sku": "SKU-00421337", "qty": 3, "amount_cents": 129900, "currency": "EUR", "note": "gift wrap leave at door ring bell fragile ex"}');
