// Templates deploy/monitoring/prometheus.yml for a local cluster on
// loopback: each job's DNS service discovery is replaced by static targets
// that carry the labels discovery would have produced (namespace, pod);
// relabel rules, rule files and everything else stay as written. Scrape and
// evaluation intervals shrink to 1 s so that a short test sees samples.
//   node prometheus_local_config.js OUT.yml JOB=POD@HOST:PORT[,POD@HOST:PORT] ...
// e.g. radixkv-worker=radixkv-worker-0@127.0.0.1:9102,radixkv-worker-1@127.0.0.1:9112
// Fails when a job of the config gets no targets, a target names a job the
// config lacks, or a job has no dns_sd_configs to replace.
'use strict';

const fs = require('fs');
const path = require('path');
const YAML = require('yaml');

const deployDir = path.resolve(process.env.RADIXKV_DEPLOY_DIR || path.join(__dirname, '..'));

function main() {
  const [out, ...specs] = process.argv.slice(2);
  const config = YAML.parse(fs.readFileSync(path.join(deployDir, 'monitoring', 'prometheus.yml'), 'utf8'));
  const targets = {};
  for (const spec of specs) {
    const [job, list] = spec.split('=');
    targets[job] = list.split(',').map((t) => {
      const [pod, address] = t.split('@');
      return { targets: [address], labels: { namespace: 'local', pod } };
    });
  }
  const jobs = config.scrape_configs.map((j) => j.job_name);
  for (const job of Object.keys(targets)) {
    if (!jobs.includes(job)) throw new Error(`no job ${job} in prometheus.yml (jobs: ${jobs})`);
  }
  for (const j of config.scrape_configs) {
    if (!targets[j.job_name]) throw new Error(`job ${j.job_name}: no local targets given`);
    if (!j.dns_sd_configs) throw new Error(`job ${j.job_name}: no dns_sd_configs to replace`);
    delete j.dns_sd_configs;
    j.static_configs = targets[j.job_name];
  }
  config.global.scrape_interval = '1s';
  config.global.scrape_timeout = '1s';
  config.global.evaluation_interval = '1s';
  fs.writeFileSync(out, YAML.stringify(config, { lineWidth: 0 }));
  console.log(`wrote ${out}: ${jobs.length} jobs, ${Object.values(targets).flat().length} targets`);
}

main();
