// Writes the Prometheus Operator / Grafana resources of deploy/k8s/monitoring
// from their sources of truth in deploy/monitoring:
//   prometheus-rule.yaml             PrometheusRule <- monitoring/alerts.yml
//   grafana-dashboard-configmap.yaml ConfigMap (label grafana_dashboard: "1",
//                                    picked up by Grafana's dashboard sidecar,
//                                    e.g. kube-prometheus-stack) <-
//                                    monitoring/grafana/radixkv-dashboard.json
// (Kustomize may not read files outside its folder, hence the copies.)
//   node sync_operator_resources.js          rewrite both
//   node sync_operator_resources.js --check  exit 1 when one is out of date
'use strict';

const fs = require('fs');
const path = require('path');
const YAML = require('yaml');

const deployDir = path.resolve(process.env.RADIXKV_DEPLOY_DIR || path.join(__dirname, '..'));
const header = (source) => `# Generated from deploy/${source} (the source of truth):\n` +
  '#   node deploy/checks/sync_operator_resources.js\n' +
  '# deploy/checks/monitoring_config_test.sh fails when the two differ.\n';

/** [{file, text}] of the generated resources. */
function expectedFiles() {
  const rules = YAML.parse(fs.readFileSync(path.join(deployDir, 'monitoring', 'alerts.yml'), 'utf8'));
  const rule = {
    apiVersion: 'monitoring.coreos.com/v1',
    kind: 'PrometheusRule',
    metadata: {
      name: 'radixkv',
      labels: { 'app.kubernetes.io/name': 'radixkv', release: 'kube-prometheus-stack' },
    },
    spec: rules,
  };
  const dashboardText = fs.readFileSync(path.join(deployDir, 'monitoring', 'grafana', 'radixkv-dashboard.json'), 'utf8');
  JSON.parse(dashboardText);  // fail early on a broken dashboard
  const dashboard = {
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: {
      name: 'radixkv-grafana-dashboard',
      labels: { 'app.kubernetes.io/name': 'radixkv', grafana_dashboard: '1' },
      annotations: { grafana_folder: 'radixkv' },
    },
    data: { 'radixkv-dashboard.json': dashboardText },
  };
  const k8s = path.join(deployDir, 'k8s', 'monitoring');
  return [
    { file: path.join(k8s, 'prometheus-rule.yaml'), text: header('monitoring/alerts.yml') + YAML.stringify(rule, { lineWidth: 0 }) },
    { file: path.join(k8s, 'grafana-dashboard-configmap.yaml'),
      text: header('monitoring/grafana/radixkv-dashboard.json') + YAML.stringify(dashboard, { lineWidth: 0 }) },
  ];
}

if (require.main === module) {
  let stale = 0;
  for (const { file, text } of expectedFiles()) {
    if (process.argv[2] === '--check') {
      if (!fs.existsSync(file) || fs.readFileSync(file, 'utf8') !== text) {
        console.error(`${file} is out of date; run node deploy/checks/sync_operator_resources.js`);
        stale++;
      } else {
        console.log(`${path.basename(file)} is in step with its source`);
      }
    } else {
      fs.writeFileSync(file, text);
      console.log(`wrote ${file}`);
    }
  }
  process.exit(stale ? 1 : 0);
}

module.exports = { expectedFiles };
