#!/usr/bin/env bash
# psql against queenwire. One line per check: "ok psql <check>" / "FAIL psql <check>: why".
# Needs QW_HOST, QW_PORT, QW_PG_SOCKET_DIR (the embedded PostgreSQL's socket
# directory, for comparing psql's describe output with PostgreSQL's own).
set -u
HOST=${QW_HOST:-127.0.0.1}
PORT=${QW_PORT:-6543}
SOCK=${QW_PG_SOCKET_DIR:-}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
Q=compat_psql

export PGCONNECT_TIMEOUT=10
# -X: no ~/.psqlrc. Every psql call is bounded.
qw() { timeout 30 psql -X -h "$HOST" -p "$PORT" -U compat -d compat "$@"; }
pg() { timeout 30 psql -X -h "$SOCK" -p "${QW_PG_PORT:-5432}" -U "${QW_PG_USER:-queenwire}" -d "${QW_PG_DB:-postgres}" "$@"; }

ok() { echo "ok psql $1"; }
fail() {
    local name=$1; shift
    echo "FAIL psql $name: $(echo "$*" | tr '\n' ' ' | tr -s ' ' | cut -c1-400)"
}
# expect NAME GOT WANT
expect_eq() {
    if [ "$2" == "$3" ]; then ok "$1"; else fail "$1" "got [$2], want [$3]"; fi
}

# --- connect and a SELECT with psql variables as parameters ---------------------
out=$(qw -Atc 'select 1' 2>&1)
expect_eq connect "$out" "1"

out=$(qw -At -v n=41 -v s="it's" 2>&1 <<'SQL'
SELECT :n + 1, :'s', length(:'s');
SQL
)
expect_eq select_params "$out" "42|it's|4"

# --- PGOPTIONS (the "options" startup parameter) ------------------------------
a=$(PGOPTIONS='-c search_path=queen,public' qw -Atc 'SELECT current_schemas(false)' 2>&1)
b=$(PGOPTIONS='-c search_path=queen,public' pg -Atc 'SELECT current_schemas(false)' 2>&1)
expect_eq pgoptions_search_path "$a" "$b"

# --- a multi-statement script (-f), stopping on error -------------------------
cat > "$TMP/script.sql" <<SQL
-- a comment before the first statement
CREATE QUEUE $Q;
\\set payload '{"n": 1, "s": "it''s"}'
PUSH INTO $Q VALUES (:'payload'), ('{"n": 2}')  ;
SELECT queue, messages FROM queen.queue_depth WHERE queue = '$Q';
SHOW QUEUES;
SQL
out=$(qw -At -v ON_ERROR_STOP=1 -f "$TMP/script.sql" 2>&1); rc=$?
if [ $rc -eq 0 ] && echo "$out" | grep -q '^CREATE QUEUE$' \
    && [ "$(echo "$out" | grep -c "|$Q|Default|[01]||queued$")" -eq 2 ] \
    && echo "$out" | grep -q "^$Q|2$" && echo "$out" | grep -q "^$Q|1|2|2|0|"; then
    ok multi_statement_script
else
    fail multi_statement_script "rc=$rc output: $out"
fi

# --- several statements in one Query message (-c) -----------------------------
out=$(qw -At -c "SELECT 'a'; SELECT queue FROM queen.queue_depth WHERE queue = '$Q'; SHOW PARTITIONS FROM $Q" 2>&1); rc=$?
if [ $rc -eq 0 ] && [ "$(echo "$out" | head -n2 | tr '\n' ' ')" == "a $Q " ] && echo "$out" | grep -q '^Default|2|1|'; then
    ok multi_statement_query
else
    fail multi_statement_query "rc=$rc output: $out"
fi

# --- queue round trip: POP LIMIT, ACK with receipts given as psql variables, POP empty
out=$(qw -At -F '|' -c "POP FROM $Q LIMIT 10" 2>&1); rc=$?
r1=$(echo "$out" | sed -n 1p | cut -d'|' -f1)
r2=$(echo "$out" | sed -n 2p | cut -d'|' -f1)
pl=$(echo "$out" | cut -d'|' -f6 | tr '\n' ';')
if [ $rc -eq 0 ] && [ -n "$r1" ] && [ -n "$r2" ] && [ "$pl" == '{"n": 1, "s": "it'"'"'s"};{"n": 2};' ]; then
    ok pop_limit
else
    fail pop_limit "rc=$rc output: $out"
fi
out=$(qw -At -v r1="$r1" -v r2="$r2" 2>&1 <<'SQL'
ACK :'r1', :'r2';
SQL
)
expect_eq ack_receipt_params "$out" "$r1|acked
$r2|acked"
out=$(qw -c "POP FROM $Q LIMIT 10" 2>&1)
if echo "$out" | grep -q '^(0 rows)$'; then ok pop_again_empty; else fail pop_again_empty "$out"; fi

# --- \gdesc: psql prepares the statement (Parse + Describe) and lists its columns
out=$(qw -At 2>&1 <<SQL
POP FROM $Q LIMIT 2 \\gdesc
SQL
)
expect_eq gdesc_pop "$(echo "$out" | tr '\n' ';')" "receipt|text;message_id|uuid;queue|text;partition|text;offset|bigint;payload|jsonb;transaction_id|text;trace_id|text;retry_count|integer;created_at|timestamp with time zone;lease_expires_at|timestamp with time zone;"

# --- \d, \dv queen.*, \d queen.queue_depth: same output as PostgreSQL's own ----
for cmd in '\d' '\dv queen.*' '\d queen.queue_depth' '\dn' '\df queen.*'; do
    name="describe $cmd"
    case "$cmd" in
        '\d') name=backslash_d ;;
        '\dv queen.*') name=backslash_dv_queen ;;
        '\d queen.queue_depth') name=backslash_d_view ;;
        '\dn') name=backslash_dn ;;
        '\df queen.*') name=backslash_df_queen ;;
    esac
    a=$(qw -c "$cmd" 2>&1); b=$(pg -c "$cmd" 2>&1)
    if [ "$a" == "$b" ]; then
        ok "$name"
    else
        fail "$name" "differs from PostgreSQL: $(diff <(echo "$b") <(echo "$a") | head -n 8)"
    fi
done
out=$(qw -At -c '\dv queen.*' 2>&1)
for v in queue_depth group_lag dlq_counts; do
    echo "$out" | grep -q "^queen|$v|view|" || { fail backslash_dv_lists_views "no $v in: $out"; v=; break; }
done
[ -n "${v:-}" ] && ok backslash_dv_lists_views

# --- \x: expanded display of a POP row ----------------------------------------
qw -q -c "PUSH INTO $Q VALUES ('{\"x\": true}')" >/dev/null 2>&1
out=$(qw 2>&1 <<SQL
\\x on
POP FROM $Q;
SQL
)
if echo "$out" | grep -q '^-\[ RECORD 1 \]' && echo "$out" | grep -qE '^payload +\| \{"x": true\}$' \
    && echo "$out" | grep -qE '^lease_expires_at +\| [0-9]{4}-'; then
    ok expanded_display
else
    fail expanded_display "$out"
fi
rx=$(echo "$out" | sed -nE 's/^receipt +\| //p')
qw -q -c "ACK '$rx'" >/dev/null 2>&1

# --- \copy out of a queen view --------------------------------------------------
out=$(qw 2>&1 <<SQL
\\copy (SELECT queue, messages, pending FROM queen.queue_depth WHERE queue = '$Q') TO '$TMP/depth.csv' WITH (FORMAT csv, HEADER)
SQL
); rc=$?
got=$(cat "$TMP/depth.csv" 2>/dev/null)
if [ $rc -eq 0 ] && [ "$got" == "queue,messages,pending
$Q,3,0" ]; then ok copy_out_view; else fail copy_out_view "rc=$rc $out file: $got"; fi
out=$(qw -c "\\copy (SELECT * FROM queen.group_lag WHERE queue = '$Q') TO STDOUT" 2>&1); rc=$?
if [ $rc -eq 0 ] && echo "$out" | grep -q "	$Q	__QUEUE_MODE__	"; then ok copy_out_view_stdout; else fail copy_out_view_stdout "rc=$rc $out"; fi

# --- dialect errors: SQLSTATE shown with VERBOSITY verbose, connection still usable
out=$(qw 2>&1 <<SQL
\\set VERBOSITY verbose
POP FROM $Q LIMIT 0;
\\echo sqlstate=:LAST_ERROR_SQLSTATE
POP FROM;
SELECT 'still here';
SQL
)
if echo "$out" | grep -q '^ERROR:  22023: LIMIT must be at least 1'; then ok verbose_sqlstate; else fail verbose_sqlstate "$out"; fi
if echo "$out" | grep -q '^sqlstate=22023$'; then ok last_error_sqlstate; else fail last_error_sqlstate "$out"; fi
if echo "$out" | grep -q '^ERROR:  42601: ' && echo "$out" | grep -q '^LINE 1: POP FROM;$'; then
    ok verbose_syntax_error_position
else
    fail verbose_syntax_error_position "$out"
fi
if echo "$out" | grep -q '^ still here$'; then ok usable_after_error; else fail usable_after_error "$out"; fi

# --- a transaction of POP, PUSH, ACK rolled back --------------------------------
state() {
    qw -At -c "SELECT queue, partitions, messages, pending, dead_lettered FROM queen.queue_depth WHERE queue IN ('${Q}_in', '${Q}_out') ORDER BY queue" 2>&1
}
mid=$(qw -At 2>&1 <<SQL | tail -n1 | cut -d'|' -f1
CREATE QUEUE ${Q}_in;
CREATE QUEUE ${Q}_out;
PUSH INTO ${Q}_in VALUES ('{"job": 1}');
SQL
)
before=$(state)
out=$(qw -v ON_ERROR_STOP=1 2>&1 <<SQL
BEGIN;
POP FROM ${Q}_in \\gset m_
PUSH INTO ${Q}_out VALUES ('{"done": 1}');
ACK :'m_receipt';
\\echo status=:m_message_id
ROLLBACK;
SQL
); rc=$?
after=$(state)
again=$(qw -At -c "POP FROM ${Q}_in LIMIT 5" 2>&1)
outq=$(qw -At -c "POP FROM ${Q}_out LIMIT 5" 2>&1)
if [ $rc -eq 0 ] && echo "$out" | grep -q "^status=$mid$" && echo "$out" | grep -q '^ROLLBACK$' \
    && [ "$before" == "$after" ] && [ "$(echo "$again" | cut -d'|' -f2)" == "$mid" ] && [ -z "$outq" ]; then
    ok tx_rollback
else
    fail tx_rollback "rc=$rc out=[$out] before=[$before] after=[$after] again=[$again] outq=[$outq]"
fi
