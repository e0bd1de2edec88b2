#!/bin/bash
# Test: the Prometheus configuration, alert rules and Grafana dashboard are
# valid for Debian's Prometheus 2.42 and name metrics that exist.
#  - promtool check config deploy/monitoring/prometheus.yml (+ its rule file)
#  - promtool check rules + promtool test rules (alerts_test.yml: each alert
#    fires on a series that should trigger it, and not on one that should not)
#  - the PrometheusRule for the Operator is in step with alerts.yml
#  - every dashboard query parses (as a recording rule through promtool) and
#    every radixkv_* metric it or an alert names is registered in the code
# Self-tests show that a broken expression and an unknown metric fail.
set -euo pipefail

if [[ -n "${TEST_SRCDIR:-}" ]]; then
  root="${TEST_SRCDIR}/${TEST_WORKSPACE}"
else
  root="$(cd "$(dirname "$0")/../.." && pwd)"
fi
mon="${root}/deploy/monitoring"
node_check="${root}/deploy/checks/run_node_check.sh"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
# By hand: remove the scratch folder at exit (Bazel cleans TEST_TMPDIR).
[[ -n "${TEST_TMPDIR:-}" ]] || trap 'rm -rf "$tmp"' EXIT
command -v promtool >/dev/null || { echo "promtool not found (scripts/install_deps.sh installs prometheus)"; exit 1; }

echo "== promtool check config"
promtool check config "${mon}/prometheus.yml"
echo "== promtool check rules / test rules"
promtool check rules "${mon}/alerts.yml"
(cd "$mon" && promtool test rules alerts_test.yml)
echo "== PrometheusRule and dashboard ConfigMap in step with their sources"
"$node_check" sync_operator_resources.js --check
echo "== dashboard queries parse"
"$node_check" dashboard_queries.js rules "${tmp}/dashboard_rules.yml"
promtool check rules "${tmp}/dashboard_rules.yml"
echo "== dashboard and alert metric names are registered by the processes"
"$node_check" dashboard_queries.js names

echo "== self-tests"
printf 'groups:\n- name: x\n  rules:\n  - record: x\n    expr: sum by (le (rate(radixkv_worker_step_seconds_bucket[1m]))\n' >"${tmp}/broken.yml"
if promtool check rules "${tmp}/broken.yml" >/dev/null 2>&1; then
  echo "FAIL: promtool accepted a broken expression"; exit 1
fi
fake="${tmp}/fake_deploy"
mkdir -p "${fake}/monitoring/grafana"
cp "${mon}/alerts.yml" "${fake}/monitoring/"
sed 's/radixkv_cache_active_leases/radixkv_cache_leases_held/' \
  "${mon}/grafana/radixkv-dashboard.json" >"${fake}/monitoring/grafana/radixkv-dashboard.json"
if out=$(RADIXKV_DEPLOY_DIR="$fake" "$node_check" dashboard_queries.js names); then
  echo "FAIL: an unregistered metric name passed"; exit 1
fi
grep -q "FAIL \"Active leases\" A: metric radixkv_cache_leases_held is registered by no process" <<<"$out" ||
  { echo "FAIL: unexpected output: $out"; exit 1; }
echo "self-tests: a broken expression and an unregistered metric are caught"
echo "monitoring config ok"
