"""Shared helpers of the Python clients of the queenwire compatibility suite.

Every check prints exactly one line: ``ok <client> <check>`` or
``FAIL <client> <check>: <why>``. ``tests/compat/run`` counts those lines.
"""

import os
import sys
import traceback

HOST = os.environ.get("QW_HOST", "127.0.0.1")
PORT = int(os.environ.get("QW_PORT", "6543"))
USER = os.environ.get("QW_USER", "compat")
DB = os.environ.get("QW_DB", "compat")
# The embedded PostgreSQL behind queenwire, reached directly (Unix socket).
PG_SOCKET_DIR = os.environ.get("QW_PG_SOCKET_DIR", "")
PG_PORT = int(os.environ.get("QW_PG_PORT", "5432"))
PG_USER = os.environ.get("QW_PG_USER", "queenwire")
PG_DB = os.environ.get("QW_PG_DB", "postgres")

# Result columns of the queue statements, as docs/dialect.md and
# shared/DIALECT.md give them: (name, PostgreSQL type name, type OID).
PUSH_COLUMNS = [
    ("message_id", "uuid", 2950),
    ("queue", "text", 25),
    ("partition", "text", 25),
    ("offset", "int8", 20),
    ("transaction_id", "text", 25),
    ("status", "text", 25),
]
POP_COLUMNS = [
    ("receipt", "text", 25),
    ("message_id", "uuid", 2950),
    ("queue", "text", 25),
    ("partition", "text", 25),
    ("offset", "int8", 20),
    ("payload", "jsonb", 3802),
    ("transaction_id", "text", 25),
    ("trace_id", "text", 25),
    ("retry_count", "int4", 23),
    ("created_at", "timestamptz", 1184),
    ("lease_expires_at", "timestamptz", 1184),
]
ACK_COLUMNS = [
    ("receipt", "text", 25),
    ("status", "text", 25),
]
QUEEN_VIEWS = {"queue_depth", "group_lag", "dlq_counts"}
QUEUE_DEPTH_COLUMNS = ["tenant_id", "queue", "partitions", "messages", "pending",
                       "dead_lettered", "created_at"]


class CheckFailed(Exception):
    pass


def expect(cond, why):
    if not cond:
        raise CheckFailed(why)


def expect_eq(got, want, what):
    if got != want:
        raise CheckFailed(f"{what}: got {got!r}, want {want!r}")


def one_line(text, limit=400):
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class Reporter:
    """Runs named checks and prints one line per check."""

    def __init__(self, client):
        self.client = client
        self.failed = set()
        self.passed = 0
        self.failures = 0

    def _emit(self, line):
        print(line, flush=True)

    def ok(self, name):
        self.passed += 1
        self._emit(f"ok {self.client} {name}")

    def fail(self, name, why):
        self.failures += 1
        self.failed.add(name)
        self._emit(f"FAIL {self.client} {name}: {one_line(why)}")

    def check(self, name, fn, needs=()):
        """Run fn(); ok when it returns, FAIL when it raises. Returns fn's value
        (None on failure). A check whose prerequisite failed is a FAIL too."""
        missing = [n for n in needs if n in self.failed]
        if missing:
            self.fail(name, f"not run: {', '.join(missing)} failed")
            return None
        try:
            value = fn()
        except CheckFailed as e:
            self.fail(name, str(e))
            return None
        except Exception as e:  # the driver's exception: report it whole
            detail = describe_exception(e)
            if os.environ.get("QW_COMPAT_DEBUG"):
                traceback.print_exc(file=sys.stderr)
            self.fail(name, detail)
            return None
        self.ok(name)
        return value


def describe_exception(e):
    parts = [type(e).__module__ + "." + type(e).__name__]
    for attr in ("sqlstate", "pgcode", "code"):
        v = getattr(e, attr, None)
        if isinstance(v, str) and v:
            parts.append(f"SQLSTATE {v}")
            break
    parts.append(str(e) or repr(e))
    return " ".join(parts)


def sqlstate_of(e):
    for attr in ("sqlstate", "pgcode"):
        v = getattr(e, attr, None)
        if isinstance(v, str) and v:
            return v
    orig = getattr(e, "orig", None)  # SQLAlchemy wraps the driver's exception
    if orig is not None and orig is not e:
        return sqlstate_of(orig)
    return None
