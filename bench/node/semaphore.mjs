#!/usr/bin/env node
// redis-semaphore's RedlockSemaphore (a sorted set of holders on each master, admitted while it
// has fewer than K, granted by a majority) in the scenarios bench/redlock-bench.c runs with
// --limit K, for bench/semaphore.sh; the same JSON lines (the peers harness's contract).
//
//   throughput  C workers, each on a semaphore name of its own (one RedlockSemaphore per worker,
//               kept for the run): tryAcquire with one attempt, release; per-cycle latency.
//   contention  W workers on one name: tryAcquire with up to retry_count retries every
//               retry_delay_ms (redis-semaphore has a fixed retryInterval: no jitter), hold
//               hold_ms, release, think think_ms. A violation is a grant while K others of this
//               process hold; BENCH_INTERVALS=FILE writes every hold as "start end" (ns,
//               process.hrtime: CLOCK_MONOTONIC, as the C bench's uv_hrtime) from the grant to
//               the release call, for holders.mjs.
// Environment: BENCH_SERVERS, BENCH_SCENARIO, BENCH_LIMIT (K), BENCH_CONCURRENCY,
// BENCH_WORKERS, BENCH_DURATION_S, BENCH_WARMUP, BENCH_TTL_MS, BENCH_HOLD_MS, BENCH_THINK_MS,
// BENCH_RETRY_COUNT, BENCH_RETRY_DELAY_MS, BENCH_IMPL, BENCH_INTERVALS, BENCH_NAME (the
// contention's name, shared by the checker's processes). No auto-refresh
// (refreshInterval 0: the C bench does not extend either). Loopback only; every loop bounded
// by its duration.
import { createRequire } from 'node:module';
import { randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { servers, clients } from './servers.mjs';

const require = createRequire(import.meta.url);
const { RedlockSemaphore } = require('redis-semaphore');

const env = (name, dflt) => (process.env[name] ? Number(process.env[name]) : dflt);
const IMPL = process.env.BENCH_IMPL || 'redis-semaphore';
const SCENARIO = process.env.BENCH_SCENARIO || 'throughput';
const K = env('BENCH_LIMIT', 1);
const CONC = env('BENCH_CONCURRENCY', 1);
const WORKERS = env('BENCH_WORKERS', 8);
const DURATION_S = env('BENCH_DURATION_S', 5);
const WARMUP = env('BENCH_WARMUP', 200);
const TTL = env('BENCH_TTL_MS', 10000);
const HOLD = env('BENCH_HOLD_MS', 1);
const THINK = env('BENCH_THINK_MS', 5);
const RETRIES = env('BENCH_RETRY_COUNT', 100);
const DELAY = env('BENCH_RETRY_DELAY_MS', 10);
for (const [n, v] of [['BENCH_LIMIT', K], ['BENCH_CONCURRENCY', CONC], ['BENCH_WORKERS', WORKERS],
                      ['BENCH_DURATION_S', DURATION_S]])
  if (!(v >= 1 && v <= 3600)) throw new Error(`${n} out of range: ${v}`);
const version = JSON.parse(readFileSync(new URL('./node_modules/redis-semaphore/package.json',
                                                import.meta.url))).version;
const base = `rlbench:${IMPL}:${process.pid}:${randomBytes(4).toString('hex')}`;
const now = () => process.hrtime.bigint();   // ns, monotonic

const redis = clients();
await Promise.all(redis.map((c) => (c.status === 'ready' ? null
  : new Promise((ok, fail) => { c.once('ready', ok); setTimeout(fail, 5000, new Error('not ready')); }))));

const sem = (name, attempts) => new RedlockSemaphore(redis, name, K, {
  lockTimeout: TTL, acquireAttemptsLimit: attempts, retryInterval: DELAY,
  acquireTimeout: (attempts + 1) * (DELAY + 1000), refreshInterval: 0 });

function pct(sorted, p) {
  if (sorted.length === 0) return 0;
  const r = Math.min(sorted.length, Math.max(1, Math.ceil((p / 100) * sorted.length)));
  return sorted[r - 1];
}

function emit(scenario, conc, samplesUs, opsPerS, extra) {
  const s = Float64Array.from(samplesUs).sort();
  const mean = s.length ? s.reduce((a, b) => a + b, 0) / s.length : 0;
  const row = { impl: IMPL, n_servers: servers.length, scenario, concurrency: conc, ops: s.length,
                p50_us: pct(s, 50), p90_us: pct(s, 90), p99_us: pct(s, 99),
                max_us: s.length ? s[s.length - 1] : 0, ops_per_s: opsPerS, mean_us: mean,
                ttl_ms: TTL, version: `redis-semaphore ${version}`,
                runtime: `Node ${process.version}, ioredis`, returns_at: 'all', limit: K, ...extra };
  process.stdout.write(`${JSON.stringify(row)}\n`);
  console.error(`[${IMPL}] ${scenario} K=${K} c=${conc} ops=${s.length} p50=${row.p50_us.toFixed(1)}us `
                + `p99=${row.p99_us.toFixed(1)}us ops/s=${opsPerS.toFixed(0)}`);
}

// Warm-up: sequential cycles on a name of its own, not recorded.
{
  const w = sem(`${base}:warmup`, 1);
  for (let i = 0; i < WARMUP; i++) if (await w.tryAcquire()) await w.release();
}

const t0 = now();
const end = t0 + BigInt(Math.round(DURATION_S * 1e9));
let lastStop = t0;

if (SCENARIO === 'throughput') {
  const cycles = [];
  let errors = 0;
  await Promise.all(Array.from({ length: CONC }, async (_, i) => {
    const s = sem(`${base}:tp:${i}`, 1);
    while (now() < end) {
      const a = now();
      if (await s.tryAcquire()) {
        await s.release();
        cycles.push(Number(now() - a) / 1e3);
      } else {
        errors++;
      }
    }
    lastStop = now() > lastStop ? now() : lastStop;
  }));
  const el = Number(lastStop - t0) / 1e9;
  emit('throughput', CONC, cycles, cycles.length / el, { errors, duration_s: el });
} else if (SCENARIO === 'contention') {
  const waits = [];
  const intervals = [];
  const counts = new Array(WORKERS).fill(0);
  let holding = 0;
  let maxHolding = 0;
  let violations = 0;
  let failures = 0;
  await Promise.all(Array.from({ length: WORKERS }, async (_, i) => {
    const s = sem(process.env.BENCH_NAME || `${base}:contention`, RETRIES + 1);
    while (now() < end) {
      const a = now();
      if (await s.tryAcquire()) {
        const g = now();
        if (++holding > K) violations++;
        if (holding > maxHolding) maxHolding = holding;
        waits.push(Number(g - a) / 1e3);
        counts[i]++;
        await sleep(HOLD);
        const r = now();
        holding--;
        intervals.push(`${g} ${r}\n`);
        await s.release();
      } else {
        failures++;
      }
      await sleep(THINK);
    }
    lastStop = now() > lastStop ? now() : lastStop;
  }));
  const el = Number(lastStop - t0) / 1e9;
  if (process.env.BENCH_INTERVALS) writeFileSync(process.env.BENCH_INTERVALS, intervals.join(''));
  const sum = counts.reduce((a, b) => a + b, 0);
  const sum2 = counts.reduce((a, b) => a + b * b, 0);
  emit('contention', WORKERS, waits, waits.length / el, {
    fairness_jain: sum2 ? (sum * sum) / (WORKERS * sum2) : 0, per_worker_min: Math.min(...counts),
    per_worker_max: Math.max(...counts), failures, violations, max_holders: maxHolding,
    hold_ms: HOLD, think_ms: THINK, retry: { count: RETRIES, delay_ms: DELAY, jitter_ms: 0 },
    duration_s: el });
} else {
  throw new Error(`unknown scenario ${SCENARIO} (throughput, contention)`);
}
for (const c of redis) c.disconnect();
