// Test: every object of every kustomization under deploy/k8s (base, each
// overlay, monitoring) renders and passes the Kubernetes schema with no
// unknown field. Self-tests first show that the checks fail where they must
// (an injected typo, a wrong type, an unsupported kustomization field).
//   node manifest_schema_test.js  (env RADIXKV_DEPLOY_DIR, default: this folder's parent)
'use strict';

const assert = require('assert');
const fs = require('fs');
const os = require('os');
const path = require('path');
const { render } = require('./kustomize_render');
const { checkObject, objectId } = require('./manifest_schema');

const deployDir = path.resolve(process.env.RADIXKV_DEPLOY_DIR || path.join(__dirname, '..'));
const k8sDir = path.join(deployDir, 'k8s');

/** Every folder under deploy/k8s holding a kustomization.yaml. */
function kustomizations(dir) {
  const out = [];
  if (fs.existsSync(path.join(dir, 'kustomization.yaml'))) out.push(dir);
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    if (e.isDirectory()) out.push(...kustomizations(path.join(dir, e.name)));
  }
  return out;
}

function selfTests() {
  const objs = render(path.join(k8sDir, 'overlays', 'cpu-demo'));
  const sts = objs.find((o) => o.kind === 'StatefulSet' && o.metadata.name === 'radixkv-worker');
  assert.ok(sts, 'cpu-demo renders the worker StatefulSet');
  assert.deepStrictEqual(checkObject(sts), [], 'the worker StatefulSet is valid as written');

  const typo = JSON.parse(JSON.stringify(sts));
  typo.spec.replicass = 3;
  typo.spec.template.spec.containers[0].foo = 'bar';
  typo.spec.template.spec.containers[0].readinessProbe.grpc.prot = 1;
  typo.metadata.labelz = { a: 'b' };
  assert.deepStrictEqual(checkObject(typo).sort(), [
    'unknown field /metadata/labelz',
    'unknown field /spec/replicass',
    'unknown field /spec/template/spec/containers/0/foo',
    'unknown field /spec/template/spec/containers/0/readinessProbe/grpc/prot',
  ]);
  // A free-form map (labels) takes any key: no false positive.
  const labels = JSON.parse(JSON.stringify(sts));
  labels.metadata.labels['example.com/anything'] = 'x';
  assert.deepStrictEqual(checkObject(labels), []);

  const badType = JSON.parse(JSON.stringify(sts));
  badType.spec.template.spec.containers[0].ports[0].containerPort = '50061';
  const p = checkObject(badType);
  assert.strictEqual(p.length, 1, p.join('\n'));
  assert.match(p[0], /^schema: \/spec\/template\/spec\/containers\/0\/ports\/0\/containerPort must be integer/);

  const missing = JSON.parse(JSON.stringify(sts));
  delete missing.spec.selector;
  assert.match(checkObject(missing).join('\n'), /^schema: \/spec must have required property selector$/);

  // The Prometheus Operator's custom resources are checked the same way.
  const monitoring = render(path.join(k8sDir, 'monitoring'));
  const sm = JSON.parse(JSON.stringify(monitoring.find((o) => o.kind === 'ServiceMonitor')));
  assert.deepStrictEqual(checkObject(sm), []);
  sm.spec.endpoints[0].portt = 'metrics';
  assert.deepStrictEqual(checkObject(sm), ['unknown field /spec/endpoints/0/portt']);
  const cm = monitoring.find((o) => o.kind === 'ConfigMap' && o.metadata.name === 'radixkv-grafana-dashboard');
  assert.ok(cm && JSON.parse(cm.data['radixkv-dashboard.json']).uid === 'radixkv-overview', 'dashboard ConfigMap');
  const pr = JSON.parse(JSON.stringify(monitoring.find((o) => o.kind === 'PrometheusRule')));
  pr.spec.groups[0].rules[0].exp = pr.spec.groups[0].rules[0].expr;
  delete pr.spec.groups[0].rules[0].expr;
  assert.deepStrictEqual(checkObject(pr).sort(), [
    'schema: /spec/groups/0/rules/0 must have required property expr',
    'unknown field /spec/groups/0/rules/0/exp',
  ]);

  assert.deepStrictEqual(checkObject({ apiVersion: 'v9', kind: 'Nope', metadata: { name: 'x' } }),
    ['no schema module for apiVersion v9']);

  // The renderer refuses what it does not implement, and dangling patches.
  const tmp = fs.mkdtempSync(path.join(process.env.TEST_TMPDIR || os.tmpdir(), 'kustomize-'));
  fs.writeFileSync(path.join(tmp, 'kustomization.yaml'), 'resources: []\nnamePrefix: x-\n');
  assert.throws(() => render(tmp), /field "namePrefix" is not supported/);
  fs.writeFileSync(path.join(tmp, 'cm.yaml'), 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {k: v}\n');
  fs.writeFileSync(path.join(tmp, 'kustomization.yaml'),
    'resources: [cm.yaml]\npatches:\n  - target: {kind: ConfigMap, name: b}\n    patch: "[]"\n');
  assert.throws(() => render(tmp), /matches no object/);
  fs.writeFileSync(path.join(tmp, 'kustomization.yaml'),
    'resources: [cm.yaml]\npatches:\n  - target: {kind: ConfigMap, name: a}\n' +
    '    patch: "[{op: replace, path: /data/missing, value: 1}]"\n');
  assert.throws(() => render(tmp), /replace of missing path \/data\/missing/);
  console.log('self-tests: unknown fields, wrong types, missing fields and renderer limits are caught');
}

function main() {
  selfTests();
  const dirs = kustomizations(k8sDir);
  const expected = ['base', 'monitoring', 'overlays/cpu-demo', 'overlays/gpu', 'overlays/gpu-rocm'];
  assert.deepStrictEqual(dirs.map((d) => path.relative(k8sDir, d)).sort(), expected);
  let failures = 0;
  for (const dir of dirs) {
    const objs = render(dir);
    const kinds = {};
    for (const o of objs) {
      kinds[o.kind] = (kinds[o.kind] || 0) + 1;
      for (const problem of checkObject(o)) {
        console.log(`FAIL ${path.relative(deployDir, dir)}: ${objectId(o)}: ${problem}`);
        failures++;
      }
    }
    console.log(`${path.relative(deployDir, dir)}: ${objs.length} objects checked ` +
      `(${Object.entries(kinds).map(([k, n]) => `${n} ${k}`).join(', ')})`);
    assert.ok(objs.length > 0, `${dir} renders no object`);
  }
  // The overlays deploy the whole system.
  for (const overlay of ['cpu-demo', 'gpu', 'gpu-rocm']) {
    const ids = render(path.join(k8sDir, 'overlays', overlay)).map(objectId);
    for (const want of ['StatefulSet/radixkv-redis', 'StatefulSet/radixkv-cache-service',
      'StatefulSet/radixkv-worker', 'Deployment/radixkv-router', 'Service/radixkv-router',
      'HorizontalPodAutoscaler/radixkv-router', 'PodDisruptionBudget/radixkv-worker',
      'PodDisruptionBudget/radixkv-router', 'PodDisruptionBudget/radixkv-cache-service']) {
      assert.ok(ids.includes(want), `${overlay} lacks ${want}`);
    }
  }
  if (failures) {
    console.log(`${failures} schema problems`);
    process.exit(1);
  }
  console.log('all manifests valid, no unknown fields');
}

main();
