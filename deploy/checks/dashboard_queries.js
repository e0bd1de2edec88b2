// The PromQL of the Grafana dashboard and the alert rules, for the checks:
//   node dashboard_queries.js rules OUT.yml
//       writes every dashboard query as a recording rule, so that
//       `promtool check rules OUT.yml` parses each expression
//   node dashboard_queries.js names
//       checks that every radixkv_* metric named by the dashboard and the
//       alerts is registered by the processes' code (a prometheus-cpp
//       .Name("...") in cache_service/, worker/ or router/), and that the
//       dashboard's panels are well formed; exit 1 on a problem.
// Grafana variables are substituted as the live test does (see
// substituteVariables).
'use strict';

const fs = require('fs');
const path = require('path');
const YAML = require('yaml');

const deployDir = path.resolve(process.env.RADIXKV_DEPLOY_DIR || path.join(__dirname, '..'));
const sourceRoot = path.resolve(process.env.RADIXKV_SOURCE_ROOT || path.join(deployDir, '..'));
const dashboardFile = path.join(deployDir, 'monitoring', 'grafana', 'radixkv-dashboard.json');
const alertsFile = path.join(deployDir, 'monitoring', 'alerts.yml');

/** Replaces Grafana's variables with concrete values. */
function substituteVariables(expr, vars = {}) {
  const v = { namespace: '.*', __rate_interval: '1m', __range: '5m', __interval: '15s', ...vars };
  return expr.replace(/\$\{?(\w+)\}?/g, (m, name) => {
    if (!(name in v)) throw new Error(`unknown dashboard variable ${m} in ${expr}`);
    return v[name];
  });
}

/** [{panel, refId, expr}] for every query of the dashboard. */
function dashboardQueries(dashboard) {
  const out = [];
  const visit = (panels) => {
    for (const p of panels || []) {
      if (p.type === 'row') {
        visit(p.panels);
        continue;
      }
      for (const t of p.targets || []) out.push({ panel: p.title, refId: t.refId, expr: t.expr });
    }
  };
  visit(dashboard.panels);
  return out;
}

/** radixkv_* metric names in a PromQL expression (histogram suffixes removed). */
function metricNames(expr) {
  return [...new Set([...expr.matchAll(/\b(radixkv_[a-z0-9_]+)/g)]
    .map((m) => m[1].replace(/_(bucket|sum|count)$/, '')))];
}

/** Metric names registered in the C++ sources (prometheus-cpp Name("...")). */
function registeredMetrics() {
  const names = new Set();
  for (const dir of ['cache_service', 'worker', 'router', 'process']) {
    const root = path.join(sourceRoot, dir);
    if (!fs.existsSync(root)) continue;
    const walk = (d) => {
      for (const e of fs.readdirSync(d, { withFileTypes: true })) {
        const p = path.join(d, e.name);
        if (e.isDirectory()) walk(p);
        else if (/\.(cc|h)$/.test(e.name) && !/_test\.cc$/.test(e.name)) {
          for (const m of fs.readFileSync(p, 'utf8').matchAll(/\.Name\(\s*"(radixkv_[a-z0-9_]+)"/g)) names.add(m[1]);
        }
      }
    };
    walk(root);
  }
  return names;
}

function checkNames() {
  const dashboard = JSON.parse(fs.readFileSync(dashboardFile, 'utf8'));
  const registered = registeredMetrics();
  const problems = [];
  if (registered.size === 0) problems.push(`no metric registrations found under ${sourceRoot}`);
  const queries = dashboardQueries(dashboard);
  const ids = new Set();
  const cells = new Set();
  const visit = (panels) => {
    for (const p of panels) {
      if (ids.has(p.id)) problems.push(`panel id ${p.id} is used twice`);
      ids.add(p.id);
      const g = p.gridPos;
      for (let x = g.x; x < g.x + g.w; x++) {
        for (let y = g.y; y < g.y + g.h; y++) {
          if (cells.has(`${x},${y}`)) problems.push(`panel "${p.title}" overlaps another panel at ${x},${y}`);
          cells.add(`${x},${y}`);
        }
      }
      if (g.x + g.w > 24) problems.push(`panel "${p.title}" is wider than the grid`);
      if (p.type !== 'row') {
        if (!p.description) problems.push(`panel "${p.title}" has no description`);
        if (!(p.targets || []).length) problems.push(`panel "${p.title}" has no query`);
        if (!p.datasource || p.datasource.uid !== '${datasource}') problems.push(`panel "${p.title}" does not use $datasource`);
      }
      if (p.type === 'row') visit(p.panels || []);
    }
  };
  visit(dashboard.panels);
  const used = new Set();
  for (const q of queries) {
    substituteVariables(q.expr);
    if (!/namespace=~"\$namespace"/.test(q.expr)) problems.push(`"${q.panel}" ${q.refId}: no namespace=~"$namespace" filter`);
    for (const n of metricNames(q.expr)) {
      used.add(n);
      if (!registered.has(n)) problems.push(`"${q.panel}" ${q.refId}: metric ${n} is registered by no process`);
    }
  }
  const alerts = YAML.parse(fs.readFileSync(alertsFile, 'utf8'));
  for (const g of alerts.groups) {
    for (const r of g.rules) {
      for (const n of metricNames(r.expr)) {
        if (!registered.has(n)) problems.push(`alert ${r.alert}: metric ${n} is registered by no process`);
      }
    }
  }
  const unused = [...registered].filter((n) => !used.has(n)).sort();
  console.log(`dashboard: ${ids.size} panels, ${queries.length} queries over ${used.size} metrics; ` +
    `${registered.size} metrics registered by the processes`);
  if (unused.length) console.log(`registered but not on the dashboard: ${unused.join(', ')}`);
  for (const p of problems) console.log(`FAIL ${p}`);
  return problems.length === 0;
}

function writeRules(out) {
  const dashboard = JSON.parse(fs.readFileSync(dashboardFile, 'utf8'));
  const rules = dashboardQueries(dashboard).map((q, i) => ({
    record: `radixkv_dashboard:query_${i}`,
    expr: substituteVariables(q.expr),
    labels: { panel: q.panel, ref_id: q.refId },
  }));
  fs.writeFileSync(out, YAML.stringify({ groups: [{ name: 'radixkv-dashboard-queries', rules }] }, { lineWidth: 0 }));
  console.log(`wrote ${rules.length} dashboard queries to ${out}`);
}

module.exports = { dashboardQueries, substituteVariables, metricNames, dashboardFile };

if (require.main === module) {
  if (process.argv[2] === 'rules') writeRules(process.argv[3]);
  else if (process.argv[2] === 'names') process.exit(checkNames() ? 0 : 1);
  else {
    console.error('usage: dashboard_queries.js rules OUT.yml | names');
    process.exit(2);
  }
}
