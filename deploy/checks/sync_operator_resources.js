// Writes deploy/k8s/monitoring/prometheus-rule.yaml (a PrometheusRule for
// the Prometheus Operator) from deploy/monitoring/alerts.yml, the one source
// of the alerting rules.
//   node sync_prometheus_rule.js          rewrite the PrometheusRule
//   node sync_prometheus_rule.js --check  exit 1 when it is out of date
'use strict';

const fs = require('fs');
const path = require('path');
const YAML = require('yaml');

const deployDir = path.resolve(process.env.RADIXKV_DEPLOY_DIR || path.join(__dirname, '..'));
const alertsFile = path.join(deployDir, 'monitoring', 'alerts.yml');
const ruleFile = path.join(deployDir, 'k8s', 'monitoring', 'prometheus-rule.yaml');

/** The PrometheusRule text for the rule groups in alerts.yml. */
function expectedRuleText() {
  const rules = YAML.parse(fs.readFileSync(alertsFile, 'utf8'));
  const obj = {
    apiVersion: 'monitoring.coreos.com/v1',
    kind: 'PrometheusRule',
    metadata: {
      name: 'radixkv',
      labels: { 'app.kubernetes.io/name': 'radixkv', release: 'kube-prometheus-stack' },
    },
    spec: rules,
  };
  return '# Generated from deploy/monitoring/alerts.yml (the source of truth):\n' +
    '#   node deploy/checks/sync_prometheus_rule.js\n' +
    '# deploy/checks/monitoring_config_test.sh fails when the two differ.\n' +
    YAML.stringify(obj, { lineWidth: 0 });
}

if (require.main === module) {
  const want = expectedRuleText();
  if (process.argv[2] === '--check') {
    const have = fs.readFileSync(ruleFile, 'utf8');
    if (have !== want) {
      console.error(`${ruleFile} is out of date with ${alertsFile}; run node deploy/checks/sync_prometheus_rule.js`);
      process.exit(1);
    }
    console.log('prometheus-rule.yaml matches alerts.yml');
  } else {
    fs.writeFileSync(ruleFile, want);
    console.log(`wrote ${ruleFile}`);
  }
}

module.exports = { expectedRuleText };
