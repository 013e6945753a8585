#!/usr/bin/env bash
# Where one queenwire workload of the benchmark spends the machine: CPU of
# PostgreSQL's backends, its background processes, queenwire and the load
# generator over a slice of the timed run, and PostgreSQL's WAL over the
# same slice (records and bytes per log_segments row written, when the
# workload writes any). No sampling profiler: /proc and pg_stat only, so
# the figures are of the run as it is.
#
#   bench/cpu-split.sh WORKLOAD [SECONDS]    e.g. bench/cpu-split.sh push1_100p 6
#
# SYSTEMS (default "queenwire") and C (default 8) as for bench/profile.sh;
# QW: the queenwire binary (default: the one next to the bench).
set -euo pipefail
workload=${1:?usage: bench/cpu-split.sh WORKLOAD [SECONDS]}
secs=${2:-6}
target=${CARGO_TARGET_DIR:-/work/target-bench}
bench="$target/release/queenwire-bench"
[ -x "$bench" ] || { echo "build the bench first" >&2; exit 1; }
out=$(mktemp -d /tmp/qwsplit.XXXXXX)

"$bench" --only "$workload" --systems "${SYSTEMS:-queenwire}" --concurrency "${C:-8}" \
    --rounds 1 --secs $((secs + 8)) --keep --queenwire "${QW:-$target/release/queenwire}" \
    >"$out/bench.out" 2>"$out/bench.err" &
bench_pid=$!
trap 'kill $bench_pid 2>/dev/null || true' EXIT
for _ in $(seq 1 1200); do
    grep -q "^bench: timing" "$out/bench.err" 2>/dev/null && break
    sleep 0.1
done
sleep 2
dir=/tmp/qwbench-$bench_pid
pgport=$(sed -n 4p "$dir/pgdata/postmaster.pid")
postmaster=$(head -1 "$dir/pgdata/postmaster.pid")
psql() { command psql -X -q -At -h "$dir/run" -p "$pgport" -U queenwire -d postgres "$@"; }
qw=$(pgrep -P "$bench_pid" -x queenwire)

# pid, kind, utime+stime in clock ticks, for every process measured.
snapshot() {
    local pid kind
    for pid in $(pgrep -P "$postmaster"); do
        kind=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | sed -E 's/^postgres: //') || continue
        case "$kind" in
            *"[local]"* | *"127.0.0.1"* | *idle* | *" in transaction"*) kind=backend ;;
            *) kind="postgres ${kind%% *}" ;;
        esac
        echo "$pid|$kind|$(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null)"
    done
    echo "$qw|queenwire|$(awk '{print $14 + $15}' "/proc/$qw/stat")"
    echo "$bench_pid|load generator|$(awk '{print $14 + $15}' "/proc/$bench_pid/stat")"
}
psql -c "SELECT pg_stat_reset(), pg_stat_reset_shared('wal')" >/dev/null
snapshot >"$out/before"
sleep "$secs"
snapshot >"$out/after"
psql -F ' ' -c "SELECT w.wal_records, w.wal_bytes, COALESCE(t.n_tup_ins, 0)
                FROM pg_stat_wal w LEFT JOIN pg_stat_user_tables t
                  ON t.schemaname = 'queen' AND t.relname = 'log_segments'" >"$out/wal"
wait "$bench_pid" || true
trap - EXIT

echo "workload $workload, ${secs} s of the timed slice:"
grep "^| $workload " "$out/bench.out" || true
awk -F'|' -v secs="$secs" -v hz="$(getconf CLK_TCK)" '
    NR == FNR { before[$1] = $3; next }
    $3 != "" { used[$2] += $3 - (($1 in before) ? before[$1] : 0) }
    END { for (k in used) printf "  %-28s %.3f cores\n", k, used[k] / hz / secs }
' "$out/before" "$out/after" | sort -k2 -t'|'
read -r records bytes segments <"$out/wal"
if [ "${segments:-0}" -gt 0 ]; then
    awk -v r="$records" -v b="$bytes" -v s="$segments" \
        'BEGIN { printf "  WAL: %.2f records and %.0f bytes a segment (%d segments)\n", r / s, b / s, s }'
else
    echo "  WAL: $records records, $bytes bytes"
fi
rm -rf "$out" "$dir"
