#!/usr/bin/env bash
# What an ACK of one lease's batch costs PostgreSQL, receipt by receipt
# (queen.log_ack_v1) against one run of offsets (queen.log_ack_v2), as the
# number of messages in the batch grows.
#
#   bench/ack_cost.sh [QUEENWIRE_BINARY]
#
# Starts queenwire on its embedded PostgreSQL in a fresh directory, pushes
# 200 messages into each of 160 partitions through it, then on one backend
# pops a batch of n (log_pop_v2) and acks it with one function or the other,
# timed inside a DO block with clock_timestamp() (no network in the time),
# 20 batches for each n and function, alternating. Prints the median and the
# minimum in ms. Needs psql; PORT (default 6544) is queenwire's TCP port.
set -euo pipefail
target=${CARGO_TARGET_DIR:-/work/target-bench}
binary=${1:-$target/release/queenwire}
[ -x "$binary" ] || { echo "no queenwire binary at $binary (build with --release)" >&2; exit 1; }
port=${PORT:-6544}
dir=$(mktemp -d /tmp/qw-ackcost.XXXXXX)
mkdir -p "$dir/sock"
chmod 777 "$dir" "$dir/sock"
"$binary" --data-dir "$dir/data" --listen "127.0.0.1:$port" --unix-socket-dir "$dir/sock" \
    >"$dir/queenwire.log" 2>&1 &
qw=$!
trap 'kill $qw 2>/dev/null || true; wait $qw 2>/dev/null || true; rm -rf "$dir"' EXIT
for _ in $(seq 1 300); do
    [ -S "$dir/sock/.s.PGSQL.$port" ] && break
    sleep 0.2
done
[ -S "$dir/sock/.s.PGSQL.$port" ] || { cat "$dir/queenwire.log" >&2; exit 1; }

values=$(seq 0 99 | sed 's/.*/('"'"'{"n":&,"pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}'"'"')/' | paste -sd, -)
for p in $(seq 0 159); do
    echo "PUSH INTO ack_cost PARTITION p$p VALUES $values;"
    echo "PUSH INTO ack_cost PARTITION p$p VALUES $values;"
done | psql -X -q -h "$dir/sock" -p "$port" -U queenwire -d postgres >/dev/null

# The embedded cluster's own socket (its port is always 5432 there).
psql -X -q -h "$dir/data/run" -p 5432 -U queenwire -d postgres <<'SQL'
CREATE TEMP TABLE ack_cost (v INT, n INT, ms FLOAT8);
DO $$
DECLARE
    c RECORD; t0 TIMESTAMPTZ; v INT; n INT; p INT := 0; got INT;
BEGIN
    FOR rep IN 1..20 LOOP
        FOREACH n IN ARRAY ARRAY[1, 10, 100, 200] LOOP
            FOREACH v IN ARRAY ARRAY[1, 2] LOOP
                SELECT min(r.partition_id) AS pid, min(r.from_offset) AS lo,
                       max(r.to_offset) AS hi, (array_agg(r.lease_token))[1] AS tok
                INTO c
                FROM queen.log_pop_v2('ack_cost', 'p' || (p % 160), 'g', n, n, NULL,
                                      'beginning', NULL, false) r
                WHERE r.state = 'claimed';
                p := p + 1;
                t0 := clock_timestamp();
                IF v = 1 THEN
                    SELECT count(*) INTO got FROM queen.log_ack_v1(
                        ARRAY(SELECT c.pid FROM generate_series(c.lo, c.hi)),
                        ARRAY(SELECT generate_series(c.lo, c.hi)),
                        ARRAY(SELECT 'g'::TEXT FROM generate_series(c.lo, c.hi)),
                        ARRAY(SELECT c.tok FROM generate_series(c.lo, c.hi))) a
                    WHERE a.status = 'acked';
                ELSE
                    SELECT count(*) * (c.hi - c.lo + 1) INTO got FROM queen.log_ack_v2(
                        ARRAY[c.pid], ARRAY['g'], ARRAY[c.tok], ARRAY[c.lo], ARRAY[c.hi]) a
                    WHERE a.status = 'acked' AND a.message_offset IS NULL;
                END IF;
                INSERT INTO ack_cost
                VALUES (v, n, extract(epoch FROM clock_timestamp() - t0) * 1000);
                IF got IS DISTINCT FROM n THEN
                    RAISE EXCEPTION 'log_ack_v% acked % of % messages', v, got, n;
                END IF;
            END LOOP;
        END LOOP;
    END LOOP;
END
$$;
\pset footer off
SELECT n AS messages,
       'log_ack_v' || v AS function,
       round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::NUMERIC, 3) AS median_ms,
       round(min(ms)::NUMERIC, 3) AS min_ms
FROM ack_cost GROUP BY n, v ORDER BY n, v;
SQL
