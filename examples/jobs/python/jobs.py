#!/usr/bin/env python3
"""A job queue on queenwire with psycopg 3: one shared queue, W workers.

Pushes N jobs into a queue, then runs W worker threads, each with its own
connection, that POP one job at a time, do it and ACK it. The queue is
created with ordered = false (a shared queue): each message is leased on its
own, so the workers run in parallel on one queue without partitions. Every
job whose number is a multiple of --fail-every fails on its first attempt
and is answered with ACK ... FAILED: queenwire hands it out again after the
queue's retry_delay, with retry_count + 1, and then it succeeds.

    pip install "psycopg[binary]"
    python3 jobs.py [--url postgresql://me@127.0.0.1:6543/jobs] [--queue jobs]
                    [--jobs 200] [--workers 4] [--fail-every 7] [--work-ms 20]

The URL may also come from QW_URL; QW_EXAMPLE_QUEUE_OPTIONS replaces the
queue's WITH list (default: ordered = false, retry_delay = '100ms').
Ctrl-C or SIGTERM stops the workers gracefully: each finishes and ACKs the
job in hand. --jobs 0 pushes nothing and works the queue until stopped.
Exit status 0 when every job this run pushed was acknowledged exactly once.
"""

import argparse
import os
import re
import secrets
import signal
import threading
import time

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

QUEUE_OPTIONS = os.environ.get("QW_EXAMPLE_QUEUE_OPTIONS", "ordered = false, retry_delay = '100ms'")
PUSH_BATCH = 100


class Ledger:
    """What happened to this run's jobs: a job is done when its ACK says 'acked'."""

    def __init__(self, run, jobs, stop):
        self.run, self.jobs, self.stop = run, jobs, stop
        self.lock = threading.Lock()
        self.acked = {}          # job number -> how many ACKs answered 'acked'
        self.dead = set()        # job numbers dead-lettered
        self.retried = self.stale = self.others = 0
        self.by_worker = {}      # worker number -> jobs it acknowledged

    def record(self, worker, payload, status):
        with self.lock:
            ours = payload.get("run") == self.run
            if status == "retry":
                self.retried += 1
            elif status == "stale":      # the lease was lost: the job comes back
                self.stale += 1
            elif not ours:               # left in the queue by an earlier run
                self.others += 1
            elif status == "dead_lettered":
                self.dead.add(payload["job"])
            elif status == "acked":
                self.acked[payload["job"]] = self.acked.get(payload["job"], 0) + 1
                self.by_worker[worker] = self.by_worker.get(worker, 0) + 1
            if self.jobs and len(self.acked) + len(self.dead) >= self.jobs:
                self.stop.set()          # every job finished: let the workers go


def do_job(job, retry_count, fail_every, work_ms):
    time.sleep(work_ms / 1000)
    if fail_every and job % fail_every == 0 and retry_count == 0:
        raise RuntimeError(f"job {job}: failed on its first attempt")


def push_jobs(conn, queue, run, jobs):
    for first in range(1, jobs + 1, PUSH_BATCH):
        numbers = range(first, min(first + PUSH_BATCH, jobs + 1))
        values = ", ".join(["(%s)"] * len(numbers))
        rows = conn.execute(f"PUSH INTO {queue} VALUES {values}",
                            [Jsonb({"run": run, "job": n}) for n in numbers]).fetchall()
        if len(rows) != len(numbers) or any(r["status"] != "queued" for r in rows):
            raise SystemExit(f"PUSH did not queue jobs {first}..{numbers[-1]}: {rows}")


def worker(number, args, ledger, stop):
    try:
        with psycopg.connect(args.url, autocommit=True, row_factory=dict_row) as conn:
            while not stop.is_set():
                msg = conn.execute(f"POP FROM {args.queue} LIMIT 1 WAIT '1s'").fetchone()
                if msg is None:
                    continue
                payload = msg["payload"]
                try:
                    do_job(payload.get("job", 0), msg["retry_count"], args.fail_every, args.work_ms)
                except Exception as e:  # any failure of the job: hand it back for a retry
                    ack = conn.execute("ACK %s FAILED REASON %s", (msg["receipt"], str(e)))
                else:
                    ack = conn.execute("ACK %s", (msg["receipt"],))
                ledger.record(number, payload, ack.fetchone()["status"])
    except psycopg.Error as e:
        print(f"worker {number} stopped: {e}", flush=True)


def report(ledger, jobs, workers, elapsed):
    """Prints the summary; True when every job was acknowledged exactly once."""
    twice = sorted(j for j, n in ledger.acked.items() if n > 1)
    missing = [j for j in range(1, jobs + 1) if j not in ledger.acked]
    print(f"jobs done: {len(ledger.acked)} of {jobs}, failures retried: {ledger.retried}, "
          f"stale acks: {ledger.stale}, workers: {workers}, elapsed: {elapsed:.1f} s")
    print("done per worker: " + " ".join(str(ledger.by_worker.get(w, 0)) for w in range(1, workers + 1)))
    if ledger.others:
        print(f"jobs of earlier runs done: {ledger.others}")
    if twice:
        print(f"acknowledged more than once: {twice}")
    if ledger.dead:
        print(f"dead-lettered: {sorted(ledger.dead)}")
    if missing:
        print(f"not done (still in the queue): {len(missing)} jobs, first {missing[:10]}")
    return not twice and not missing


def main():
    p = argparse.ArgumentParser(description="A job queue on queenwire (psycopg 3).")
    p.add_argument("--url", default=os.environ.get("QW_URL", "postgresql://me@127.0.0.1:6543/jobs"))
    p.add_argument("--queue", default="jobs")
    p.add_argument("--jobs", type=int, default=200, help="jobs to push (0: push none, work until stopped)")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--fail-every", type=int, default=7, help="job numbers divisible by this fail once")
    p.add_argument("--work-ms", type=int, default=20, help="how long one job takes")
    args = p.parse_args()
    if not re.fullmatch(r"[a-z_][a-z0-9_]*", args.queue):
        p.error("--queue: a lower-case SQL identifier, please")  # it is written into the SQL text

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    run = secrets.token_hex(4)  # tells this run's jobs from any left in the queue before
    ledger = Ledger(run, args.jobs, stop)
    started = time.monotonic()

    try:
        with psycopg.connect(args.url, autocommit=True, row_factory=dict_row) as conn:
            with_list = f" WITH ({QUEUE_OPTIONS})" if QUEUE_OPTIONS.strip() else ""
            conn.execute(f"CREATE QUEUE IF NOT EXISTS {args.queue}{with_list}")
            push_jobs(conn, args.queue, run, args.jobs)
    except psycopg.Error as e:
        raise SystemExit(f"setting up {args.queue}: {e}")
    print(f"pushed {args.jobs} jobs into {args.queue} (run {run}); {args.workers} workers start", flush=True)

    threads = [threading.Thread(target=worker, args=(number, args, ledger, stop))
               for number in range(1, args.workers + 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return 0 if report(ledger, args.jobs, args.workers, time.monotonic() - started) else 1


if __name__ == "__main__":
    raise SystemExit(main())
