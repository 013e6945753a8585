-- A plain INSERT of the same row into a table (bench_insert: id bigserial
-- primary key, part text, payload jsonb).
-- One transaction of a queenwire-bench pgbench cell (bench/src/pgbench.rs);
-- run it yourself with: pgbench -n -c 8 -j 2 -T 10 -M simple -f FILE
INSERT INTO bench_insert (part, payload) VALUES (NULL, '{"seq": 1, "event": "order.created", "customer": "cus_4f2a9c81d3e7", "sku": "SKU-00421337", "qty": 3, "amount_cents": 129900, "currency": "EUR", "note": "gift wrap leave at door ring bell fragile ex"}') RETURNING id;
