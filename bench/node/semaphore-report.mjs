#!/usr/bin/env node
// semaphore-report.mjs FILE.jsonl: the tables of bench/semaphore.sh, each figure the median over
// the repeats ("run") with the repeats' range after it. Rows: the mutex, then per K ours
// (redlock-c-sem) and redis-semaphore; uncontended (throughput, C = 1: acquire+release cycles/s
// and the cycle's p50/p99), contended (one process of W workers: acquisitions/s, the wait's
// p50/p99; ours: the client's attempts per grant, retries and hops to a permit listed free
// included), the checker (W processes: acquisitions/s summed, the most holders at once, time
// with more than K).
import { readFileSync } from 'node:fs';

const file = process.argv[2];
if (!file) {
  console.error('usage: semaphore-report.mjs FILE.jsonl');
  process.exit(64);
}
const rows = readFileSync(file, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l));
const limitOf = (r) => (r.impl === 'redlock-c' ? 0 : r.limit);

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  if (s.length === 0) return NaN;
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
}
const fmt = (x, d = 0) => (Number.isFinite(x) ? x.toLocaleString('en-US', {
  minimumFractionDigits: d, maximumFractionDigits: d }) : '-');
// "median (min-max)" over the runs of one cell.
function cell(all, d = 0) {
  const values = all.filter(Number.isFinite);
  if (values.length === 0) return '-';
  const lo = Math.min(...values);
  const hi = Math.max(...values);
  return values.length > 1 ? `${fmt(median(values), d)} (${fmt(lo, d)}-${fmt(hi, d)})`
    : fmt(values[0], d);
}
// The values of `field` per run for the rows matching `pick`; `sum` adds a run's rows.
function perRun(pick, field, sum = false) {
  const byRun = new Map();
  for (const r of rows.filter(pick)) {
    const v = typeof field === 'function' ? field(r) : r[field];
    byRun.set(r.run, sum ? (byRun.get(r.run) ?? 0) + v : Math.max(byRun.get(r.run) ?? -Infinity, v));
  }
  return [...byRun.values()];
}

const impls = [['redlock-c', 'mutex (redlock-c)']];
const ks = [...new Set(rows.filter((r) => r.impl !== 'redlock-c').map((r) => r.limit))]
  .sort((a, b) => a - b);
const lines = [];
const oneProcess = rows.filter((r) => r.procs === 1 && r.scenario !== 'x_holders');
const sets = [[0, 'redlock-c', 'mutex']];
for (const k of ks) sets.push([k, 'redlock-c-sem', 'ours'], [k, 'redis-semaphore', 'redis-semaphore']);
if (oneProcess.length > 0) {   // not with ONLY=checker
  lines.push('| K | implementation | uncontended cycles/s | cycle p50 / p99 us | '
             + `contended acquisitions/s (${oneProcess.find((r) => r.scenario === 'contention')?.concurrency} workers) | `
             + 'wait p50 / p99 ms | attempts per grant | most holders at once (1 process) |');
  lines.push('|---|---|---|---|---|---|---|---|');
  for (const [k, impl, label] of sets) {
    const is = (sc, procs) => (r) => r.impl === impl && limitOf(r) === k && r.scenario === sc
      && r.procs === procs;
    const tp = is('throughput', 1);
    const ct = is('contention', 1);
    lines.push(`| ${k || 1} | ${label} | ${cell(perRun(tp, 'ops_per_s'))} | `
      + `${cell(perRun(tp, 'p50_us'), 1)} / ${cell(perRun(tp, 'p99_us'), 1)} | `
      + `${cell(perRun(ct, 'ops_per_s'))} | ${cell(perRun(ct, (r) => r.p50_us / 1000), 1)} / `
      + `${cell(perRun(ct, (r) => r.p99_us / 1000), 1)} | `
      + `${cell(perRun(ct, (r) => (r.grants ? r.attempts / r.grants : NaN)), 2)} | `
      + `${cell(perRun(is('x_holders', 1), 'max_holders'))} |`);
  }
  lines.push('');
}
lines.push('| K | implementation | checker: acquisitions/s (all processes) | failures | holds | '
           + 'most holders at once | time with more than K: ms (% of the run) | stretches |');
lines.push('|---|---|---|---|---|---|---|---|');
for (const [k, impl, label] of sets.slice(1)) {
  const many = (sc) => (r) => r.impl === impl && r.limit === k && r.scenario === sc && r.procs > 1;
  const h = many('x_holders');
  const ms = perRun(h, 'over_limit_ms');
  const pct = perRun(h, 'over_limit_pct');
  lines.push(`| ${k} | ${label} | ${cell(perRun(many('contention'), 'ops_per_s', true))} | `
    + `${cell(perRun(many('contention'), 'failures', true))} | ${cell(perRun(h, 'holds'))} | `
    + `${perRun(h, 'max_holders').join(' / ')} | ${cell(ms, 1)} (${cell(pct, 2)} %) | `
    + `${cell(perRun(h, 'over_limit_stretches'))} |`);
}
process.stdout.write(`${lines.join('\n')}\n`);
const bad = rows.filter((r) => r.impl !== 'redis-semaphore' && r.scenario === 'x_holders'
                        && r.max_holders > (r.limit || 1));
if (bad.length) {
  console.error(`semaphore-report: ours exceeded K in ${bad.length} runs`);
  process.exitCode = 1;
}
