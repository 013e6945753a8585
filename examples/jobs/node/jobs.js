'use strict';
// A job queue on queenwire with node-postgres (pg): one shared queue, W workers.
//
// Pushes N jobs into a queue, then runs W workers, each an async loop with
// its own connection, that POP one job at a time, do it and ACK it. The
// queue is created with ordered = false (a shared queue): each message is
// leased on its own, so the workers run in parallel on one queue without
// partitions. Every job whose number is a multiple of --fail-every fails on
// its first attempt and is answered with ACK ... FAILED: queenwire hands it
// out again after the queue's retry_delay, with retry_count + 1, and then it
// succeeds.
//
//   npm install
//   node jobs.js [--url postgresql://me@127.0.0.1:6543/jobs] [--queue jobs]
//                [--jobs 200] [--workers 4] [--fail-every 7] [--work-ms 20]
//
// The URL may also come from QW_URL; QW_EXAMPLE_QUEUE_OPTIONS replaces the
// queue's WITH list (default: ordered = false, retry_delay = '100ms').
// Ctrl-C or SIGTERM stops the workers gracefully: each finishes and ACKs the
// job in hand. --jobs 0 pushes nothing and works the queue until stopped.
// Exit status 0 when every job this run pushed was acknowledged exactly once.

const { parseArgs } = require('node:util');
const { randomBytes } = require('node:crypto');
const { setTimeout: sleep } = require('node:timers/promises');
const { Client } = require('pg');

const QUEUE_OPTIONS = process.env.QW_EXAMPLE_QUEUE_OPTIONS ?? "ordered = false, retry_delay = '100ms'";
const PUSH_BATCH = 100;

const { values: opts } = parseArgs({
  options: {
    url: { type: 'string', default: process.env.QW_URL || 'postgresql://me@127.0.0.1:6543/jobs' },
    queue: { type: 'string', default: 'jobs' },
    jobs: { type: 'string', default: '200' },
    workers: { type: 'string', default: '4' },
    'fail-every': { type: 'string', default: '7' },
    'work-ms': { type: 'string', default: '20' },
  },
});
const queue = opts.queue;
const jobs = Number(opts.jobs);
const workers = Number(opts.workers);
const failEvery = Number(opts['fail-every']);
const workMs = Number(opts['work-ms']);
if (!/^[a-z_][a-z0-9_]*$/.test(queue)) { // it is written into the SQL text
  console.error('--queue: a lower-case SQL identifier, please');
  process.exit(2);
}

const run = randomBytes(4).toString('hex'); // tells this run's jobs from any left in the queue before
let stopping = false;

// What happened to this run's jobs: a job is done when its ACK says 'acked'.
const ledger = {
  acked: new Map(), // job number -> how many ACKs answered 'acked'
  dead: new Set(), // job numbers dead-lettered
  retried: 0,
  stale: 0,
  others: 0,
  byWorker: new Array(workers).fill(0),

  record(worker, payload, status) {
    const ours = payload.run === run;
    if (status === 'retry') this.retried++;
    else if (status === 'stale') this.stale++; // the lease was lost: the job comes back
    else if (!ours) this.others++; // left in the queue by an earlier run
    else if (status === 'dead_lettered') this.dead.add(payload.job);
    else if (status === 'acked') {
      this.acked.set(payload.job, (this.acked.get(payload.job) || 0) + 1);
      this.byWorker[worker - 1]++;
    }
    if (jobs && this.acked.size + this.dead.size >= jobs) stopping = true; // every job finished
  },
};

async function doJob(job, retryCount) {
  await sleep(workMs);
  if (failEvery && job % failEvery === 0 && retryCount === 0) {
    throw new Error(`job ${job}: failed on its first attempt`);
  }
}

async function pushJobs(client) {
  for (let first = 1; first <= jobs; first += PUSH_BATCH) {
    const numbers = [];
    for (let n = first; n < first + PUSH_BATCH && n <= jobs; n++) numbers.push(n);
    const values = numbers.map((_, i) => `($${i + 1})`).join(', ');
    const { rows } = await client.query(`PUSH INTO ${queue} VALUES ${values}`,
      numbers.map((n) => JSON.stringify({ run, job: n })));
    if (rows.length !== numbers.length || rows.some((r) => r.status !== 'queued')) {
      throw new Error(`PUSH did not queue jobs ${first}..${numbers.at(-1)}: ${JSON.stringify(rows)}`);
    }
  }
}

async function worker(number) {
  const client = new Client({ connectionString: opts.url });
  try {
    await client.connect();
    while (!stopping) {
      const { rows } = await client.query(`POP FROM ${queue} LIMIT 1 WAIT '1s'`);
      if (rows.length === 0) continue;
      const { receipt, payload, retry_count: retryCount } = rows[0];
      let failure = null;
      try {
        await doJob(payload.job, retryCount);
      } catch (e) { // any failure of the job: hand it back for a retry
        failure = e;
      }
      const ack = failure
        ? await client.query('ACK $1 FAILED REASON $2', [receipt, failure.message])
        : await client.query('ACK $1', [receipt]);
      ledger.record(number, payload, ack.rows[0].status);
    }
  } catch (e) {
    console.log(`worker ${number} stopped: ${e.message}`);
  } finally {
    await client.end().catch(() => {});
  }
}

// Prints the summary; true when every job was acknowledged exactly once.
function report(elapsed) {
  const twice = [...ledger.acked].filter(([, n]) => n > 1).map(([job]) => job).sort((a, b) => a - b);
  const missing = [];
  for (let job = 1; job <= jobs; job++) if (!ledger.acked.has(job)) missing.push(job);
  console.log(`jobs done: ${ledger.acked.size} of ${jobs}, failures retried: ${ledger.retried}, `
    + `stale acks: ${ledger.stale}, workers: ${workers}, elapsed: ${elapsed.toFixed(1)} s`);
  console.log(`done per worker: ${ledger.byWorker.join(' ')}`);
  if (ledger.others) console.log(`jobs of earlier runs done: ${ledger.others}`);
  if (twice.length) console.log(`acknowledged more than once: [${twice.join(', ')}]`);
  if (ledger.dead.size) console.log(`dead-lettered: [${[...ledger.dead].sort((a, b) => a - b).join(', ')}]`);
  if (missing.length) {
    console.log(`not done (still in the queue): ${missing.length} jobs, first [${missing.slice(0, 10).join(', ')}]`);
  }
  return twice.length === 0 && missing.length === 0;
}

async function main() {
  for (const sig of ['SIGINT', 'SIGTERM']) process.on(sig, () => { stopping = true; });
  const started = performance.now();

  const client = new Client({ connectionString: opts.url });
  try {
    await client.connect();
    const withList = QUEUE_OPTIONS.trim() ? ` WITH (${QUEUE_OPTIONS})` : '';
    await client.query(`CREATE QUEUE IF NOT EXISTS ${queue}${withList}`);
    await pushJobs(client);
  } catch (e) {
    console.error(`setting up ${queue}: ${e.message}`);
    return 1;
  } finally {
    await client.end().catch(() => {});
  }
  console.log(`pushed ${jobs} jobs into ${queue} (run ${run}); ${workers} workers start`);

  const numbers = Array.from({ length: workers }, (_, i) => i + 1);
  await Promise.all(numbers.map(worker));
  return report((performance.now() - started) / 1000) ? 0 : 1;
}

main().then((code) => { process.exitCode = code; });
