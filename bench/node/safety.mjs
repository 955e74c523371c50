#!/usr/bin/env node
// node-redlock 5.0.0-beta.2 safety under bench/faults.sh's schedule: BENCH_WORKERS (8) clients,
// each with its own connections, compete for one key (ttl BENCH_TTL_MS, 1000; retryCount 0,
// a new attempt every 5-15 ms), hold a granted lock 20 ms and release it. An overlap is two
// workers holding at once, each within the validity node-redlock gave it (lock.expiration),
// seen in this one process on one clock. For BENCH_SECONDS (30); one JSON line on stdout.
import { setTimeout as sleep } from 'node:timers/promises';

const { default: Redlock } = await import('redlock');
const { servers, clients: makeClients } = await import('./servers.mjs');

const TTL = Number(process.env.BENCH_TTL_MS || 1000);
const SECONDS = Number(process.env.BENCH_SECONDS || 30);
const WORKERS = Number(process.env.BENCH_WORKERS || 8);
const KEY = `safety:${process.pid}`;

const holders = new Map();   // worker -> expiration (ms, Date.now clock of node-redlock)
let grants = 0, overlaps = 0;
const end = Date.now() + SECONDS * 1000;
const all = [];

async function worker(id) {
  const clients = makeClients();
  all.push(...clients);
  const redlock = new Redlock(clients, { retryCount: 0 });
  redlock.on('error', () => {});
  while (Date.now() < end) {
    try {
      const lock = await redlock.acquire([KEY], TTL);
      const t = Date.now();
      grants++;
      for (const [other, exp] of holders)
        if (other !== id && exp > t) overlaps++;
      holders.set(id, lock.expiration);
      await sleep(20);
      holders.delete(id);
      await lock.release().catch(() => {});
    } catch (e) {
      // refused or failed: try again shortly
    }
    await sleep(5 + Math.floor(Math.random() * 10));
  }
}

await Promise.all(Array.from({ length: WORKERS }, (_, i) => worker(i)));
process.stdout.write(JSON.stringify({ impl: 'node-redlock-v5b', scenario: 'x_safety',
                                      workers: WORKERS, ttl_ms: TTL, seconds: SECONDS,
                                      grants, overlaps }) + '\n');
for (const c of all) c.disconnect();
process.exit(0);
