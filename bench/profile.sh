#!/usr/bin/env bash
# Profiles one queenwire workload of the benchmark with perf (system-wide
# sampling restricted to the processes under test) and PostgreSQL's
# per-function timing (track_functions = pl).
#
#   bench/profile.sh WORKLOAD [SECONDS]    e.g. bench/profile.sh push100 10
#
# Needs perf (apt-get install linux-perf) and a built bench
# (CARGO_TARGET_DIR=/work/target-bench cargo build --release -p queenwire-bench;
# the bench builds the queenwire binary itself). Writes
# PG_SET="plan_cache_mode=force_generic_plan" tries settings on every session.
# $OUT/{perf-pg.data,perf-qw.data,*-self.txt,*-inclusive.txt,functions.txt} (OUT defaults to /tmp/qwprofile-WORKLOAD).
set -euo pipefail
workload=${1:?usage: bench/profile.sh WORKLOAD [SECONDS]}
secs=${2:-10}
target=${CARGO_TARGET_DIR:-/work/target-bench}
out=${OUT:-/tmp/qwprofile-$workload}
mkdir -p "$out"
systems=${SYSTEMS:-queenwire}

bench="$target/release/queenwire-bench"
[ -x "$bench" ] || { echo "build the bench first" >&2; exit 1; }

# One long slice of the workload, queenwire only.
"$bench" --only "$workload" --systems "$systems" --concurrency "${C:-8}" \
    --rounds 1 --secs $((secs + 12)) --prefill-cap "${PREFILL:-2000000}" --keep --queenwire "$target/release/queenwire" \
    >"$out/bench.out" 2>"$out/bench.err" &
bench_pid=$!
trap 'kill $bench_pid 2>/dev/null || true' EXIT

dir=/tmp/qwbench-$bench_pid
for _ in $(seq 1 600); do
    [ -f "$dir/pgdata/postmaster.pid" ] && grep -q "starting .*queenwire" "$out/bench.err" && break
    sleep 0.1
done
postmaster=$(head -1 "$dir/pgdata/postmaster.pid")
# The cluster's port and socket directory, as postmaster.pid records them.
pgport=$(sed -n 4p "$dir/pgdata/postmaster.pid")
psql() { command psql -X -q -h "$dir/run" -p "$pgport" -U queenwire -d postgres "$@"; }
psql -c "ALTER SYSTEM SET track_functions = 'pl'" -c "SELECT pg_reload_conf()" >/dev/null
# PG_SET="name=value …": settings to try (every session, at the reload).
for setting in ${PG_SET:-}; do
    psql -c "ALTER SYSTEM SET ${setting%%=*} = '${setting#*=}'" >/dev/null
done
[ -n "${PG_SET:-}" ] && psql -c "SELECT pg_reload_conf()" >/dev/null

# Wait for the timed slice (prefills come first for consume workloads).
for _ in $(seq 1 1200); do
    grep -q "^bench: timing" "$out/bench.err" && break
    sleep 0.1
done
sleep 3
psql -c "SELECT pg_stat_reset()" >/dev/null
qw=$(pgrep -P $bench_pid -x queenwire)
# PostgreSQL is built with frame pointers; the Rust binary is not, so its
# stacks are unwound from DWARF (it has line tables: debug = 1).
# System-wide, reported for the postgres command only: backends come and
# go during the slice, and a vanished pid stops `perf record -p`.
perf record -o "$out/perf-pg.data" -F 499 -g -a -- sleep "$secs" 2>"$out/perf-record-pg.txt" &
pg_perf=$!
perf record -o "$out/perf-qw.data" -F 499 --call-graph dwarf,16384 -p "$qw" -- sleep "$secs" 2>"$out/perf-record-qw.txt"
wait $pg_perf || true
psql -c "SELECT funcname, calls, round(total_time::numeric / calls, 3) AS ms_per_call,
                round(self_time::numeric / calls, 3) AS self_ms_per_call, round(total_time::numeric) AS total_ms
         FROM pg_stat_user_functions WHERE calls > 0 ORDER BY total_time DESC LIMIT 25" >"$out/functions.txt"
wait $bench_pid || true
trap - EXIT

report() { perf report -i "$1" --stdio "${@:2}" 2>/dev/null | grep -v '^#' | grep -v '^$'; }
report "$out/perf-pg.data" --comms postgres --no-children --sort dso,sym -g none --percent-limit 0.8 >"$out/postgres-self.txt"
report "$out/perf-pg.data" --comms postgres --children --sort sym -g none --percent-limit 4 >"$out/postgres-inclusive.txt"
report "$out/perf-qw.data" --no-children --sort dso,sym -g none --percent-limit 0.8 >"$out/queenwire-self.txt"
report "$out/perf-qw.data" --children --sort sym -g none --percent-limit 3 >"$out/queenwire-inclusive.txt"
rm -rf "$dir"
echo "profile of $workload in $out"
