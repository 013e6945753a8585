"""psycopg 3 or psycopg2 (argv[1]: psycopg3 | psycopg2) against a queenwire
started with --users (SCRAM-SHA-256), --tls-cert/--tls-key and --require-tls.

Environment: QW_AUTH_HOST, QW_AUTH_PORT, QW_AUTH_USER, QW_AUTH_PASSWORD (a user
of the users file, with passthrough full), QW_AUTH_TENANT (its tenant),
QW_AUTH_CA (the server's self-signed certificate, CN=localhost).

libpq keeps no SQLSTATE for a failed login (there is no PGresult; psycopg's
exception has sqlstate/pgcode None), so each refusal is checked twice: the
driver's ordinary connect() must raise OperationalError with the server's
message, and the same login attempted again, with the driver's own libpq set to
PQERRORS_VERBOSE before the startup packet goes out, must report the expected
SQLSTATE ("FATAL:  28P01: password authentication failed ...").
"""

import ctypes
import json
import os
import re
import select
import sys
import time

from compatlib import CheckFailed, Reporter, expect, expect_eq, one_line

DRIVER = sys.argv[1] if len(sys.argv) > 1 else "psycopg3"
if DRIVER not in ("psycopg3", "psycopg2"):
    raise SystemExit(f"unknown driver {DRIVER!r} (psycopg3 or psycopg2)")

HOST = os.environ.get("QW_AUTH_HOST", "127.0.0.1")
PORT = int(os.environ["QW_AUTH_PORT"])
USER = os.environ["QW_AUTH_USER"]
PASSWORD = os.environ["QW_AUTH_PASSWORD"]
TENANT = os.environ["QW_AUTH_TENANT"]
CA = os.environ["QW_AUTH_CA"]
QUEUE = f"authq_{DRIVER}"
PQERRORS_VERBOSE = 2

r = Reporter(DRIVER)

if DRIVER == "psycopg3":
    import psycopg
    from psycopg import pq
    from psycopg.conninfo import make_conninfo

    LIBPQ_VERSION = pq.version()

    def connect(**kw):
        params = dict(host=HOST, port=PORT, dbname="compat", connect_timeout=10)
        params.update(kw)
        return psycopg.connect(autocommit=True, **params)

    def ssl_in_use(conn):
        return conn.pgconn.ssl_in_use

    def statusmessage(cur):
        return cur.statusmessage

    def verbose_login_error(**kw):
        """Attempts the login on a bare PGconn in verbose mode; returns libpq's
        error message, or None when the login succeeded."""
        params = dict(host=HOST, port=PORT, dbname="compat", connect_timeout=10)
        params.update(kw)
        pgconn = pq.PGconn.connect_start(make_conninfo(**params).encode())
        try:
            set_verbose(pgconn.pgconn_ptr)
            deadline = time.monotonic() + 20
            while True:
                st = pgconn.connect_poll()
                if st == pq.PollingStatus.OK:
                    return None
                if st == pq.PollingStatus.FAILED:
                    return pgconn.get_error_message()
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CheckFailed("verbose login attempt: no answer within 20 s")
                if st == pq.PollingStatus.READING:
                    select.select([pgconn.socket], [], [], left)
                else:
                    select.select([], [pgconn.socket], [], left)
        finally:
            pgconn.finish()

    OperationalError = psycopg.OperationalError
else:
    import psycopg2
    import psycopg2.extensions as ext

    LIBPQ_VERSION = ext.libpq_version()

    def connect(**kw):
        params = dict(host=HOST, port=PORT, dbname="compat", connect_timeout=10)
        params.update(kw)
        conn = psycopg2.connect(**params)
        conn.autocommit = True
        return conn

    def ssl_in_use(conn):
        return conn.info.ssl_in_use

    def statusmessage(cur):
        return cur.statusmessage

    def verbose_login_error(**kw):
        params = dict(host=HOST, port=PORT, dbname="compat", connect_timeout=10)
        params.update(kw)
        conn = psycopg2.connect(async_=True, **params)
        try:
            set_verbose(conn.pgconn_ptr)
            deadline = time.monotonic() + 20
            while True:
                try:
                    st = conn.poll()
                except psycopg2.OperationalError as e:
                    return str(e)
                if st == ext.POLL_OK:
                    return None
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CheckFailed("verbose login attempt: no answer within 20 s")
                if st == ext.POLL_READ:
                    select.select([conn.fileno()], [], [], left)
                else:
                    select.select([], [conn.fileno()], [], left)
        finally:
            conn.close()

    OperationalError = psycopg2.OperationalError


_libpq = None


def set_verbose(pgconn_ptr):
    """PQsetErrorVerbosity(conn, PQERRORS_VERBOSE) through the libpq the driver
    itself loaded (the wheels bundle their own)."""
    global _libpq
    if _libpq is None:
        with open("/proc/self/maps") as f:
            paths = sorted({line.split()[-1] for line in f if "/libpq" in line})
        expect(len(paths) == 1, f"want exactly one libpq mapped, found {paths}")
        lib = ctypes.CDLL(paths[0])
        lib.PQlibVersion.restype = ctypes.c_int
        expect_eq(lib.PQlibVersion(), LIBPQ_VERSION, f"version of {paths[0]} vs the driver's libpq")
        lib.PQsetErrorVerbosity.argtypes = [ctypes.c_void_p, ctypes.c_int]
        lib.PQsetErrorVerbosity.restype = ctypes.c_int
        _libpq = lib
    _libpq.PQsetErrorVerbosity(ctypes.c_void_p(pgconn_ptr), PQERRORS_VERBOSE)


def expect_refused(sqlstate, text, **kw):
    # 1. the driver's ordinary connect()
    try:
        conn = connect(**kw)
    except OperationalError as e:
        msg = str(e)
        expect(text in msg, f"{type(e).__name__} {one_line(msg)!r} does not contain {text!r}")
    else:
        conn.close()
        raise CheckFailed(f"the login succeeded; want it refused with SQLSTATE {sqlstate}")
    # 2. the same login, libpq in verbose mode: the SQLSTATE the server sent
    msg = verbose_login_error(**kw)
    expect(msg is not None, "the verbose login attempt succeeded")
    m = re.search(r"FATAL:  ([0-9A-Z]{5}): ", msg)
    expect(m is not None, f"no SQLSTATE in the verbose message {one_line(msg)!r}")
    expect_eq(m.group(1), sqlstate, f"SQLSTATE (message: {one_line(msg)})")
    expect(text in msg, f"verbose message {one_line(msg)!r} does not contain {text!r}")


state = {}


def login():
    # sslmode=require: libpq fails the connection if the server declines TLS.
    conn = connect(user=USER, password=PASSWORD, sslmode="require")
    state["conn"] = conn
    expect(ssl_in_use(conn), "ssl_in_use is false")


r.check("auth_scram_tls_login", login)


def select_1():
    cur = state["conn"].cursor()
    cur.execute("SELECT 1")
    expect_eq(cur.fetchall(), [(1,)], "rows")


r.check("auth_select_1", select_1, needs=["auth_scram_tls_login"])


def push_pop():
    cur = state["conn"].cursor()
    cur.execute(f"PUSH INTO {QUEUE} VALUES ('{{\"a\":1}}')")
    rows = cur.fetchall()
    expect_eq(len(rows), 1, "PUSH rows")
    expect_eq((rows[0][1], rows[0][5]), (QUEUE, "queued"), "PUSH (queue, status)")
    cur.execute(f"POP FROM {QUEUE}")
    rows = cur.fetchall()
    expect_eq(len(rows), 1, "POP rows")
    payload = rows[0][5]
    if isinstance(payload, str):
        payload = json.loads(payload)
    expect_eq(payload, {"a": 1}, "payload")
    cur.execute("ACK %s", (rows[0][0],))
    expect_eq([x[1] for x in cur.fetchall()], ["acked"], "ACK status")


r.check("auth_dialect_push_pop", push_pop, needs=["auth_scram_tls_login"])


def push_visible_at_once():
    # A PUSH that has been answered is committed: a plain SELECT right after
    # it (plain SQL runs on the tenant's backend role, the PUSH on queenwire's
    # own connection) sees the message.
    q = QUEUE + "_vis"
    cur = state["conn"].cursor()
    cur.execute(f"PUSH INTO {q} VALUES ('{{\"b\":2}}')")
    expect_eq([x[5] for x in cur.fetchall()], ["queued"], "PUSH status")
    cur.execute("SELECT messages FROM queen.queue_depth WHERE queue = %s", (q,))
    rows = cur.fetchall()
    expect(rows, f"no queen.queue_depth row for {q} right after its PUSH was answered")
    expect_eq(rows, [(1,)], "messages")


r.check("auth_push_visible_at_once", push_visible_at_once, needs=["auth_dialect_push_pop"])


def tenant_of_user():
    # The queue was created in the tenant of the users file's entry (waits up
    # to 5 s for the row, so that this check is about the tenant only).
    cur = state["conn"].cursor()
    deadline = time.monotonic() + 5
    while True:
        cur.execute("SELECT tenant_id::text FROM queen.queue_depth WHERE queue = %s", (QUEUE,))
        rows = cur.fetchall()
        if rows:
            expect_eq(rows, [(TENANT,)], "queen.queue_depth tenant_id")
            return
        expect(time.monotonic() < deadline, f"no queen.queue_depth row for {QUEUE} within 5 s")
        time.sleep(0.05)


r.check("auth_tenant_of_user", tenant_of_user, needs=["auth_dialect_push_pop"])
if "conn" in state:
    state["conn"].close()


def verify_full():
    # verify-full against the self-signed certificate: queenwire serves the
    # --tls-cert it was given. host names the certificate (CN=localhost),
    # hostaddr is where libpq connects.
    conn = connect(host="localhost", hostaddr=HOST, user=USER, password=PASSWORD,
                   sslmode="verify-full", sslrootcert=CA)
    try:
        expect(ssl_in_use(conn), "ssl_in_use is false")
        cur = conn.cursor()
        cur.execute("SELECT 1")
        expect_eq(cur.fetchall(), [(1,)], "rows")
    finally:
        conn.close()


r.check("auth_tls_verify_full", verify_full)
r.check("auth_wrong_password_28P01", lambda: expect_refused(
    "28P01", f'password authentication failed for user "{USER}"',
    user=USER, password=PASSWORD + "-wrong", sslmode="require"))
r.check("auth_unknown_user_28P01", lambda: expect_refused(
    "28P01", 'password authentication failed for user "compat_auth_nobody"',
    user="compat_auth_nobody", password=PASSWORD, sslmode="require"))
# --require-tls: a plaintext login (sslmode=disable) is refused.
r.check("auth_plaintext_refused_28000", lambda: expect_refused(
    "28000", "requires TLS", user=USER, password=PASSWORD, sslmode="disable"))
