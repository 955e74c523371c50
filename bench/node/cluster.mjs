// node-redlock (v5 beta) over ioredis Cluster clients, one per Redis
// Cluster, as its users run it on clusters: the peer of bench/cluster.sh.
// Prints the same JSON rows as redlock-bench (latency_acquire,
// latency_release, throughput).
//   node cluster.mjs --seeds H:P,H:P,... [--iters 2000] [--concurrency 128]
//                    [--duration-s 10]
import Redis from 'ioredis';
import Redlock from 'redlock';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';

// The versions npm installed (package.json pins them; this says what ran).
const versionOf = (name) => JSON.parse(readFileSync(
  new URL(`./node_modules/${name}/package.json`, import.meta.url))).version;
const version =
  `redlock ${versionOf('redlock')}, ioredis Cluster ${versionOf('ioredis')}`;

const args = Object.fromEntries(process.argv.slice(2).reduce((a, v, i, all) =>
  (v.startsWith('--') ? [...a, [v.slice(2), all[i + 1]]] : a), []));
const seeds = (args.seeds || '').split(',').filter(Boolean);
const iters = Number(args.iters || 2000);
const conc = Number(args.concurrency || 128);
const durationS = Number(args['duration-s'] || 10);
const ttl = 10000;
if (seeds.length === 0) {
  console.error('usage: cluster.mjs --seeds H:P,...');
  process.exit(2);
}
const clients = seeds.map((s) => {
  const [host, port] = s.split(':');
  return new Redis.Cluster([{ host, port: Number(port) }],
    { enableReadyCheck: true, scaleReads: 'master' });
});
await Promise.all(clients.map((c) => new Promise((ok, ko) => {
  c.once('ready', ok);
  c.once('error', ko);
})));
const rl = new Redlock(clients, { retryCount: 0, driftFactor: 0.01 });
const base = `rlbench:node-cluster:${process.pid}:${randomBytes(4).toString('hex')}`;
let seq = 0;
const key = () => `${base}:${seq++}`;
const now = () => process.hrtime.bigint();

function row(scenario, c, samples, opsPerS, errors) {
  samples.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  const pct = (p) => samples.length
    ? Number(samples[Math.min(samples.length - 1,
      Math.floor(p / 100 * samples.length))]) / 1000 : 0;
  const mean = samples.length
    ? samples.reduce((a, b) => a + Number(b), 0) / samples.length / 1000 : 0;
  console.log(JSON.stringify({
    impl: 'node-redlock-v5b-cluster', n_servers: seeds.length, scenario,
    concurrency: c, ops: samples.length, p50_us: pct(50), p99_us: pct(99),
    max_us: pct(100), ops_per_s: opsPerS, mean_us: mean, ttl_ms: ttl,
    version, errors,
  }));
}

// Warm-up, then latency.
for (let i = 0; i < 200; i++) {
  const l = await rl.acquire([key()], ttl);
  await rl.release(l);
}
const acq = [];
const rel = [];
let errors = 0;
for (let i = 0; i < iters; i++) {
  try {
    const t0 = now();
    const l = await rl.acquire([key()], ttl);
    const t1 = now();
    await rl.release(l);
    acq.push(t1 - t0);
    rel.push(now() - t1);
  } catch (e) {
    errors++;
  }
}
row('latency_acquire', 1, acq, 0, errors);
row('latency_release', 1, rel, 0, errors);

// Throughput: C workers loop acquire+release for duration_s.
const cycles = [];
errors = 0;
const end = now() + BigInt(Math.round(durationS * 1e9));
const t0 = now();
await Promise.all(Array.from({ length: conc }, async () => {
  while (now() < end) {
    const s = now();
    try {
      const l = await rl.acquire([key()], ttl);
      await rl.release(l);
      cycles.push(now() - s);
    } catch (e) {
      errors++;
    }
  }
}));
const el = Number(now() - t0) / 1e9;
row('throughput', conc, cycles, cycles.length / el, errors);
await Promise.all(clients.map((c) => c.quit()));
