#!/usr/bin/env node
// holders.mjs IMPL K FILE...: the shared checker of bench/semaphore.sh. Each FILE holds one
// hold a line, "start end" in ns on CLOCK_MONOTONIC (the C bench's uv_hrtime, Node's
// process.hrtime: one clock for every process of this machine), from the grant to the release
// call, so a hold here lies inside the holder's real one. A sweep over all of them counts the
// holders at once: the most, and how long more than K held (ms, and the share of the span from
// the first grant to the last release). Prints one JSON line (scenario x_holders).
import { readFileSync } from 'node:fs';

const [impl, kArg, ...files] = process.argv.slice(2);
const K = Number(kArg);
if (!impl || !(K >= 1) || files.length === 0) {
  console.error('usage: holders.mjs IMPL K FILE...');
  process.exit(64);
}
const events = [];
let holds = 0;
for (const f of files) {
  for (const line of readFileSync(f, 'utf8').split('\n')) {
    if (line === '') continue;
    const [a, b] = line.split(' ').map(Number);
    if (!Number.isSafeInteger(a) || !Number.isSafeInteger(b) || b < a)
      throw new Error(`${f}: bad line "${line}"`);
    events.push([a, 1], [b, -1]);
    holds++;
  }
}
// At one instant a release counts before a grant: touching holds do not overlap.
events.sort((x, y) => x[0] - y[0] || x[1] - y[1]);
let n = 0;
let max = 0;
let overNs = 0;
let overSince = 0;
let overCount = 0;   // stretches with more than K holders
for (const [t, d] of events) {
  if (n > K && n + d <= K) overNs += t - overSince;
  if (n <= K && n + d > K) {
    overSince = t;
    overCount++;
  }
  n += d;
  if (n > max) max = n;
}
const span = events.length ? events[events.length - 1][0] - events[0][0] : 0;
const row = { impl, scenario: 'x_holders', limit: K, processes: files.length, holds,
              max_holders: max, over_limit_stretches: overCount, over_limit_ms: overNs / 1e6,
              over_limit_pct: span ? (100 * overNs) / span : 0, span_s: span / 1e9 };
process.stdout.write(`${JSON.stringify(row)}\n`);
console.error(`[${impl}] holders K=${K}: ${holds} holds in ${files.length} processes, at most `
              + `${max} at once; more than K during ${row.over_limit_ms.toFixed(1)} ms `
              + `(${row.over_limit_pct.toFixed(2)}% of ${row.span_s.toFixed(1)} s)`);
