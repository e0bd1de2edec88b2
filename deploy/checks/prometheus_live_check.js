// Queries a running Prometheus (started by prometheus_live_test.sh with the
// repo's scrape config over a local cluster, after a workload) and asserts
// that the Grafana dashboard's PromQL returns what an operator needs.
//   node prometheus_live_check.js http://127.0.0.1:PORT WORKER_POD...
// Asserts:
//  - every scrape target is up (job names from prometheus.yml)
//  - every dashboard query returns series (except panels that are empty on a
//    healthy short run: failovers, RPC errors), with values:
//      prefix hit rate > 0 for some worker and for the cluster,
//      pool usage present for free/evictable/protected, shares summing to 1,
//      slots per worker and state for every worker pod (the cache service's
//      `worker` label equals the worker's pod label),
//      TTFT/TPOT quantiles finite and ordered, tokens/s > 0, routing
//      decisions for cache_aware, Redis journal latency > 0, persistence
//      mode redis, journal batches and radix tree nodes present
//  - every alert rule evaluates without error on the real series.
'use strict';

const assert = require('assert');
const { dashboardQueries, substituteVariables, dashboardFile } = require('./dashboard_queries');
const fs = require('fs');

const [prom, ...workerPods] = process.argv.slice(2);
// Panels that legitimately have no series on a short, healthy run.
const MAY_BE_EMPTY = new Set(['Failovers by reason', 'Cache service RPC errors']);

async function api(pathAndQuery) {
  const r = await fetch(`${prom}${pathAndQuery}`);
  const body = await r.json();
  if (body.status !== 'success') throw new Error(`${pathAndQuery}: ${JSON.stringify(body)}`);
  return body.data;
}

async function query(expr) {
  const data = await api(`/api/v1/query?query=${encodeURIComponent(expr)}`);
  return data.result.map((s) => ({ labels: s.metric, value: Number(s.value[1]) }));
}

const fmt = (series) => series.map((s) => {
  const l = Object.entries(s.labels).filter(([k]) => k !== '__name__').map(([k, v]) => `${k}=${v}`).join(',');
  return `{${l}} ${Number.isFinite(s.value) ? +s.value.toPrecision(4) : s.value}`;
}).join('  ');

async function main() {
  // Targets.
  const targets = (await api('/api/v1/targets')).activeTargets;
  for (const t of targets) {
    assert.strictEqual(t.health, 'up', `target ${t.scrapeUrl} (${t.labels.job}) is ${t.health}: ${t.lastError}`);
  }
  const jobs = [...new Set(targets.map((t) => t.labels.job))].sort();
  assert.deepStrictEqual(jobs, ['radixkv-cache-service', 'radixkv-router', 'radixkv-worker']);
  console.log(`targets: ${targets.length} up (${jobs.join(', ')})`);

  // Every dashboard query.
  const dashboard = JSON.parse(fs.readFileSync(dashboardFile, 'utf8'));
  const results = {};
  let empty = 0;
  for (const q of dashboardQueries(dashboard)) {
    const expr = substituteVariables(q.expr, { namespace: 'local' });
    const series = await query(expr);
    results[`${q.panel}/${q.refId}`] = series;
    const tag = series.length ? 'ok   ' : (MAY_BE_EMPTY.has(q.panel) ? 'empty' : 'EMPTY');
    console.log(`${tag} ${q.panel} [${q.refId}]: ${fmt(series)}`);
    if (!series.length && !MAY_BE_EMPTY.has(q.panel)) empty++;
  }
  assert.strictEqual(empty, 0, `${empty} dashboard queries returned no series`);

  const r = (key) => results[key];
  const finite = (s) => s.filter((x) => Number.isFinite(x.value));

  const hit = finite(r('Prefix hit rate per worker/A'));
  assert.ok(hit.some((s) => s.value > 0 && s.value <= 1), 'prefix hit rate > 0 for some worker');
  const clusterHit = finite(r('Prefix hit rate (whole cluster, dashboard range)/A'));
  assert.ok(clusterHit.length === 1 && clusterHit[0].value > 0 && clusterHit[0].value <= 1, 'cluster hit rate in (0, 1]');

  const usage = r('KV pool usage by state (whole cluster)/A');
  assert.deepStrictEqual(usage.map((s) => s.labels.state).sort(), ['evictable', 'free', 'protected']);
  const total = usage.reduce((a, s) => a + s.value, 0);
  assert.ok(Math.abs(total - 1) < 1e-9, `pool shares sum to ${total}`);
  assert.ok(usage.every((s) => s.value >= 0 && s.value <= 1));
  assert.ok(usage.find((s) => s.labels.state === 'free').value > 0, 'free slots present');

  const slots = r('KV slots by state per worker/A');
  const pairs = slots.map((s) => `${s.labels.worker}/${s.labels.state}`).sort();
  const want = workerPods.flatMap((w) => ['evictable', 'free', 'protected'].map((st) => `${w}/${st}`)).sort();
  assert.deepStrictEqual(pairs, want, 'slots per worker pod and state');

  const workerPodLabels = (await query('up{job="radixkv-worker", namespace="local"}')).map((s) => s.labels.pod).sort();
  assert.deepStrictEqual(workerPodLabels, [...workerPods].sort(), 'worker pod labels = cache service worker ids');

  for (const panel of ['Time to first token', 'Time per output token']) {
    const [p50, p90, p99] = ['A', 'B', 'C'].map((id) => r(`${panel}/${id}`)[0].value);
    assert.ok(Number.isFinite(p50) && p50 > 0 && p50 <= p90 && p90 <= p99, `${panel}: p50 ${p50} p90 ${p90} p99 ${p99}`);
  }
  const generated = finite(r('Tokens/s/A'));
  assert.ok(generated.some((s) => s.value > 0), 'generated tokens/s > 0');
  assert.ok(finite(r('Tokens/s/B'))[0].value > 0, 'prefill tokens computed/s > 0');
  assert.ok(r('Routing decisions by policy/A').some((s) => s.labels.policy === 'cache_aware'), 'cache_aware decisions');
  assert.ok(r('Requests by outcome/A').some((s) => s.labels.outcome === 'ok' && s.value > 0), 'ok requests/s > 0');
  const dispatched = r('Dispatches per worker/A').map((s) => s.labels.worker_id).sort();
  assert.ok(dispatched.length >= 1 && dispatched.every((w) => workerPods.includes(w)), `dispatch worker ids ${dispatched}`);
  const journal = finite(r('Redis journal latency/B'));
  assert.ok(journal.length === 1 && journal[0].value > 0, 'Redis journal p99 > 0');
  const persistence = r('Cache service persistence/A');
  assert.deepStrictEqual(persistence.map((x) => [x.labels.mode, x.value]), [['redis', 1]], 'persistence mode redis');
  assert.ok(finite(r('Journal entries per flush/B'))[0].value > 0, 'journal entries per flush p99 > 0');
  assert.ok(r('Radix tree nodes/A')[0].value > 0, 'radix tree nodes > 0');
  const up = r('Targets up/A');
  assert.strictEqual(up.length, targets.length);
  assert.ok(up.every((s) => s.value === 1));
  console.log(`values: hit rate ${fmt(hit)}; cluster ${clusterHit[0].value.toFixed(3)}; pool ${fmt(usage)}`);

  // Alert rules evaluate on the real series.
  const groups = (await api('/api/v1/rules')).groups;
  const rules = groups.flatMap((g) => g.rules);
  const YAML = require('yaml');
  const path = require('path');
  const deployDir = path.resolve(process.env.RADIXKV_DEPLOY_DIR || path.join(__dirname, '..'));
  const written = YAML.parse(fs.readFileSync(path.join(deployDir, 'monitoring', 'alerts.yml'), 'utf8'))
    .groups.flatMap((g) => g.rules.map((x) => x.alert)).sort();
  assert.deepStrictEqual(rules.map((x) => x.name).sort(), written, 'Prometheus loaded every rule of alerts.yml');
  for (const rule of rules) {
    assert.strictEqual(rule.health, 'ok', `rule ${rule.name}: ${rule.health} ${rule.lastError || ''}`);
  }
  console.log(`alert rules: ${rules.length} evaluated without error (${rules.map((x) => `${x.name}=${x.state}`).join(', ')})`);
  console.log('dashboard queries return values on the live cluster');
}

main().catch((e) => {
  console.error(`FAIL ${e.message}`);
  process.exit(1);
});
