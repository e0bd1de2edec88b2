// Test: the Kubernetes manifests describe the radixkv that exists.
//   node manifest_consistency_test.js  (env RADIXKV_DEPLOY_DIR, RADIXKV_BIN_DIR)
//
// For every overlay (cpu-demo, gpu, gpu-rocm), every container of every pod
// template:
//  - radixkv processes (command /usr/local/bin/<process>): the command line
//    Kubernetes would run ($(VAR) expanded from the downward API, the flag
//    ConfigMap written where the volume mounts it) is run through the real
//    binary's --check_flags mode and must print "flags ok"; the effective
//    flags (defaults from --helpfull, then the flagfile, then args) must agree
//    with the container ports, the native gRPC probes (every probe is a grpc
//    probe on --grpc_port), the Prometheus annotations, and the Services;
//    addresses of other components (--cache_service, --redis) must name a
//    Service of the manifests on the right port; workers announce their pod
//    IP (--advertise_address from status.podIP) and their pod name as worker
//    id; terminationGracePeriodSeconds covers preStop + the SIGTERM drain.
//  - Redis: the ConfigMap's redis.conf is loaded by Debian's redis-server
//    and read back (appendonly yes, port = Service/containerPort).
//  - Anything else must be on a short allowlist (the model staging copy).
// Every Service port must resolve to a container port of its pods, whose
// number is the effective flag value of a radixkv process. Every image's
// binary and ports must match the Dockerfile target that builds it.
'use strict';

const assert = require('assert');
const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawnSync } = require('child_process');
const { render, podContainers } = require('./kustomize_render');

const deployDir = path.resolve(process.env.RADIXKV_DEPLOY_DIR || path.join(__dirname, '..'));
const binDir = path.resolve(process.env.RADIXKV_BIN_DIR || path.join(deployDir, '..', 'bazel-bin'));
// main.cc of each process (for the hard-coded shutdown grace): the source
// tree behind the runfiles (see run_node_check.sh).
const sourceRoot = path.resolve(process.env.RADIXKV_SOURCE_ROOT || path.join(deployDir, '..'));
const tmpRoot = fs.mkdtempSync(path.join(process.env.TEST_TMPDIR || os.tmpdir(), 'consistency-'));

const PROCESSES = ['cache_service', 'router', 'worker'];
// Image repository -> [Dockerfile, build target, the Bazel binary the image
// installs (relative to the bin dir) when it is not <process>/<process>].
const IMAGE_SOURCES = {
  'radixkv/cache-service': ['Dockerfile', 'cache-service'],
  'radixkv/router': ['Dockerfile', 'router'],
  'radixkv/worker': ['Dockerfile', 'worker'],
  'radixkv/worker-cuda': ['Dockerfile.worker-cuda', 'worker-cuda', 'worker/gpu/worker_gpu'],
  // No ROCm-linked worker exists yet; its flags will be worker_gpu's (same
  // main.cc and GPU backend), so the gpu-rocm command line is checked there.
  'radixkv/worker-rocm': ['Dockerfile.worker-rocm', 'worker-rocm', 'worker/gpu/worker_gpu'],
};

/** The binary that runs in a container of `image` for process `proc`. */
function binaryFor(proc, image) {
  const src = IMAGE_SOURCES[image.replace(/[:@].*$/, '')];
  return src && src[2] ? src[2] : path.join(proc, proc);
}

/** Bazel label of a binary path relative to the bin dir (worker/gpu/worker_gpu -> //worker/gpu:worker_gpu). */
function bazelLabel(binary) {
  return `//${path.dirname(binary)}:${path.basename(binary)}`;
}
// Flags whose value is the process's SIGTERM drain budget, if the binary has
// one; otherwise the budget is the Shutdown(absl::Seconds(N)) in its main.cc.
const DRAIN_FLAGS = ['drain_timeout_s', 'drain_timeout_ms', 'drain_timeout', 'shutdown_grace_s',
  'shutdown_grace_ms', 'shutdown_grace', 'drain_grace_s', 'drain_grace_ms', 'drain_grace'];
// Seconds between SIGKILL and the drain budget that we insist on.
const GRACE_MARGIN_S = 5;

let failures = 0;
let checks = 0;
function check(ok, message) {
  checks++;
  if (!ok) {
    failures++;
    console.log(`FAIL ${message}`);
  }
}

// ---------- binaries ----------

const helpCache = {};
/**
 * Flag name -> default value (string), from `<binary> --helpfull`; `binary`
 * is a process name or a path relative to the bin dir.
 */
function flagDefaults(binary) {
  const rel = binary.includes('/') ? binary : path.join(binary, binary);
  if (helpCache[rel]) return helpCache[rel];
  const r = spawnSync(path.join(binDir, rel), ['--helpfull'], { encoding: 'utf8' });
  const text = r.stdout + r.stderr;
  const defaults = {};
  const blocks = text.split(/\n(?=\s{4}--\w+ )/);
  for (const b of blocks) {
    const m = /^\s{4}--(\w+) \(/.exec(b);
    if (!m) continue;
    const d = /default: ([\s\S]*?);\s*$/.exec(b.split(/\n\s*\n|\n\s{2}Flags from /)[0].replace(/\n\s+/g, ' '));
    if (!d) continue;
    defaults[m[1]] = d[1].replace(/^"(.*)"$/, '$1');
  }
  assert.ok(defaults.grpc_port && defaults.metrics_port && defaults.check_flags,
    `could not read flag defaults of ${rel} from --helpfull:\n${text}`);
  helpCache[rel] = defaults;
  return defaults;
}

/** Parses --name=value / --name value / --noname / --name (bool) into pairs. */
function parseFlagArgs(args, defaults) {
  const out = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    const m = /^--?([A-Za-z_][\w]*)(?:=([\s\S]*))?$/.exec(a);
    if (!m) throw new Error(`not a flag: ${a}`);
    let [, name, value] = m;
    if (value === undefined) {
      if (defaults[name] === 'true' || defaults[name] === 'false') value = 'true';
      else if (name.startsWith('no') && (defaults[name.slice(2)] === 'true' || defaults[name.slice(2)] === 'false')) {
        name = name.slice(2);
        value = 'false';
      } else {
        value = args[++i];
      }
    }
    out.push([name, value]);
  }
  return out;
}

/** Lines of an Abseil flagfile, without comments and blank lines. */
function flagfileArgs(text) {
  return text.split('\n').map((l) => l.trim()).filter((l) => l && !l.startsWith('#'));
}

// ---------- Kubernetes semantics ----------

/** Expands $(VAR) like the kubelet; an undefined variable is an error here. */
function expandVars(s, env, where) {
  return s.replace(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (_, name) => {
    if (!(name in env)) {
      check(false, `${where}: $(${name}) is not defined in the container env`);
      return `$(${name})`;
    }
    return env[name];
  });
}

/** Env of a container as the kubelet would set it for pod `podName`. */
function containerEnv(c, podName, ns) {
  const fake = { 'metadata.name': podName, 'metadata.namespace': ns, 'status.podIP': '10.1.2.3' };
  const env = {};
  for (const e of c.env || []) {
    if (e.value !== undefined) env[e.name] = expandVars(e.value, env, e.name);
    else if (e.valueFrom && e.valueFrom.fieldRef) env[e.name] = fake[e.valueFrom.fieldRef.fieldPath];
    else throw new Error(`env ${e.name}: unsupported valueFrom`);
  }
  return env;
}

/** The ConfigMap content behind a file path inside the container, or null. */
function configMapFile(objs, podSpec, c, file) {
  for (const vm of c.volumeMounts || []) {
    const prefix = vm.mountPath.endsWith('/') ? vm.mountPath : `${vm.mountPath}/`;
    if (!file.startsWith(prefix)) continue;
    const vol = podSpec.volumes.find((v) => v.name === vm.name);
    if (!vol || !vol.configMap) return null;
    assert.ok(!vol.configMap.items, 'configMap volumes with items are not supported by this check');
    const cm = objs.find((o) => o.kind === 'ConfigMap' && o.metadata.name === vol.configMap.name);
    const key = file.slice(prefix.length);
    if (!cm || !(key in (cm.data || {}))) return null;
    return { text: cm.data[key], configMap: cm.metadata.name, key };
  }
  return null;
}

/** Resolves a probe/Service port (number or name) against a container. */
function resolvePort(c, port) {
  if (typeof port === 'number') return port;
  const p = (c.ports || []).find((x) => x.name === port);
  return p ? p.containerPort : undefined;
}

/** Parses a Go-style duration or seconds number into seconds. */
function durationSeconds(name, value) {
  if (/_ms$/.test(name)) return Number(value) / 1000;
  if (/_s$/.test(name)) return Number(value);
  const m = /^(\d+(?:\.\d+)?)(ms|s|m)$/.exec(value);
  if (!m) return Number(value);
  return Number(m[1]) * { ms: 0.001, s: 1, m: 60 }[m[2]];
}

/**
 * The SIGTERM drain budget of a process, seconds: its drain flag (if the
 * binary has one) plus the gRPC server's shutdown grace, which main.cc
 * hard-codes as Shutdown(absl::Seconds(N)) after the drain.
 */
function drainBudget(proc, flags) {
  let seconds = 0;
  const sources = [];
  for (const f of DRAIN_FLAGS) {
    if (f in flags) {
      seconds += durationSeconds(f, flags[f]);
      sources.push(`--${f}=${flags[f]}`);
      break;
    }
  }
  const main = fs.readFileSync(path.join(sourceRoot, proc, 'main.cc'), 'utf8');
  const all = [...main.matchAll(/Shutdown\(\s*absl::Seconds\((\d+)\)\s*\)/g)].map((m) => Number(m[1]));
  assert.ok(all.length > 0 || sources.length > 0, `${proc}/main.cc: no drain flag and no Shutdown(absl::Seconds(N)) found`);
  if (all.length) {
    seconds += Math.max(...all);
    sources.push(`${proc}/main.cc Shutdown(absl::Seconds(${Math.max(...all)}))`);
  }
  return { seconds, source: sources.join(' + ') };
}

/** host:port -> the Service it names, if any (name, name.ns, name.ns.svc[.cluster.local]). */
function serviceFor(objs, address, ns) {
  const m = /^(?:dns:\/\/\/)?([^:/]+):(\d+)$/.exec(address);
  if (!m) return null;
  const [, host, port] = m;
  const parts = host.split('.');
  const name = parts[0];
  const svcNs = parts[1] || ns;
  if (parts.length > 2 && !/^svc(\.cluster\.local)?$/.test(parts.slice(2).join('.'))) return null;
  const svc = objs.find((o) => o.kind === 'Service' && o.metadata.name === name && o.metadata.namespace === svcNs);
  if (!svc) return null;
  return { svc, port: Number(port) };
}

function podsOf(objs, svc) {
  return objs.filter((o) => o.spec && o.spec.template && Object.entries(svc.spec.selector || {})
    .every(([k, v]) => (o.spec.template.metadata.labels || {})[k] === v));
}

// ---------- Dockerfiles ----------

/**
 * {target: {copies: [dest...], exposes: [port...], env: {}, entrypoint, user}}
 * of a Dockerfile; a stage FROM an earlier stage inherits its files and env.
 */
function dockerTargets(file) {
  const text = fs.readFileSync(path.join(deployDir, 'docker', file), 'utf8').replace(/\\\n/g, ' ');
  const targets = {};
  let cur = null;
  for (const line of text.split('\n')) {
    let m;
    if ((m = /^FROM\s+(\S+)(?:\s+AS\s+(\S+))?/i.exec(line))) {
      const parent = targets[m[1]];
      cur = parent
        ? { copies: [...parent.copies], exposes: [...parent.exposes], env: { ...parent.env }, entrypoint: parent.entrypoint, user: parent.user }
        : { copies: [], exposes: [], env: {}, entrypoint: null, user: null };
      if (m[2]) targets[m[2]] = cur;
    } else if (cur && (m = /^COPY\s+(.*)$/i.exec(line))) {
      const parts = m[1].trim().split(/\s+/).filter((p) => !p.startsWith('--'));
      cur.copies.push(parts[parts.length - 1]);
    } else if (cur && (m = /^EXPOSE\s+(.*)$/i.exec(line))) {
      cur.exposes.push(...m[1].trim().split(/\s+/).map(Number));
    } else if (cur && (m = /^ENTRYPOINT\s+(.*)$/i.exec(line))) {
      cur.entrypoint = JSON.parse(m[1]);
    } else if (cur && (m = /^USER\s+(\S+)/i.exec(line))) {
      cur.user = m[1];
    } else if (cur && (m = /^ENV\s+(.*)$/i.exec(line))) {
      for (const kv of m[1].trim().split(/\s+/)) {
        const [k, ...v] = kv.split('=');
        cur.env[k] = v.join('=');
      }
    }
  }
  return targets;
}

// ---------- checks ----------

function checkRadixkvContainer(ctx, c, proc) {
  const { objs, obj, podSpec, where } = ctx;
  const binary = binaryFor(proc, c.image);
  ctx.binaries = ctx.binaries || new Set();
  ctx.binaries.add(binary);
  const defaults = flagDefaults(binary);
  const podName = `${obj.metadata.name}${obj.kind === 'StatefulSet' ? '-0' : '-5d8f7c9b4-x2x7q'}`;
  const env = containerEnv(c, podName, obj.metadata.namespace);
  const rawArgs = [...(c.command || []).slice(1), ...(c.args || [])].map((a) => expandVars(a, env, where));

  // Materialize flagfiles; compute the effective flags in Abseil's order.
  const runArgs = [];
  const effective = { ...defaults };
  const setInManifest = new Set();
  for (const a of rawArgs) {
    const ff = /^--flagfile=(.*)$/.exec(a);
    if (!ff) {
      runArgs.push(a);
      for (const [k, v] of parseFlagArgs([a], defaults)) {
        effective[k] = v;
        setInManifest.add(k);
      }
      continue;
    }
    const content = configMapFile(objs, podSpec, c, ff[1]);
    check(content !== null, `${where}: --flagfile=${ff[1]} is not a key of a ConfigMap mounted in the container`);
    if (content === null) continue;
    const local = path.join(tmpRoot, `${ctx.overlay}-${content.configMap}-${content.key}`);
    fs.writeFileSync(local, content.text);
    runArgs.push(`--flagfile=${local}`);
    for (const [k, v] of parseFlagArgs(flagfileArgs(content.text), defaults)) {
      effective[k] = v;
      setInManifest.add(k);
    }
  }

  // 1. The real binary of the image accepts the command line (GPU images:
  // //worker/gpu:worker_gpu, whose GPU-only flags the CPU worker lacks).
  const r = spawnSync(path.join(binDir, binary), [...runArgs, '--check_flags'],
    { encoding: 'utf8', timeout: 20000 });
  check(r.status === 0 && r.stdout.trim() === 'flags ok',
    `${where}: \`${binary} ${rawArgs.join(' ')} --check_flags\` -> exit ${r.status}: ${(r.stdout + r.stderr).trim()}`);

  // The model directory is in the image or on a volume mounted read-only.
  if ('model_dir' in defaults) {
    const dir = effective.model_dir;
    const vm = (c.volumeMounts || []).find((m) => dir.startsWith(`${m.mountPath}/`));
    const inImage = /^\/opt\/radixkv\/models\/([\w.-]+)$/.exec(dir);
    const staged = vm && (podSpec.initContainers || []).some((ic) => ic.name === 'stage-model' &&
      (ic.volumeMounts || []).some((m) => m.name === vm.name));
    const repoModel = inImage ? inImage[1] : (staged ? dir.slice(vm.mountPath.length + 1) : null);
    check(vm ? vm.readOnly === true : inImage !== null,
      `${where}: --model_dir=${dir} is neither in the image (/opt/radixkv/models) nor on a read-only volume`);
    if (repoModel !== null) {
      check(fs.existsSync(path.join(deployDir, '..', 'models', repoModel, 'tokenizer.model')),
        `${where}: --model_dir=${dir}: the image ships models/${repoModel}, which has no tokenizer.model`);
    }
  }
  // CPU workers: one compute thread per CPU of the limit, not more.
  if (proc === 'worker' && effective.device === 'cpu') {
    const lim = String(((c.resources || {}).limits || {}).cpu || '');
    const cpus = lim.endsWith('m') ? Number(lim.slice(0, -1)) / 1000 : Number(lim);
    check(Number(effective.threads) <= cpus, `${where}: --threads=${effective.threads} exceeds the CPU limit ${lim}`);
  }

  // 2. Ports, probes, scrape annotation.
  const grpcPort = Number(effective.grpc_port);
  const metricsPort = Number(effective.metrics_port);
  check(resolvePort(c, 'grpc') === grpcPort, `${where}: containerPort "grpc" ${resolvePort(c, 'grpc')} != --grpc_port ${grpcPort}`);
  check(resolvePort(c, 'metrics') === metricsPort, `${where}: containerPort "metrics" ${resolvePort(c, 'metrics')} != --metrics_port ${metricsPort}`);
  if (Number(effective.http_port || 0) > 0) {
    check(resolvePort(c, 'http') === Number(effective.http_port),
      `${where}: containerPort "http" ${resolvePort(c, 'http')} != --http_port ${effective.http_port}`);
  }
  if (effective.api_keys_file) {
    const mounted = (c.volumeMounts || []).some(
      (m) => effective.api_keys_file.startsWith(m.mountPath + '/') &&
             (podSpec.volumes || []).some((v) => v.name === m.name && v.secret));
    check(mounted, `${where}: --api_keys_file=${effective.api_keys_file} is not in a mounted Secret`);
  }
  check(effective.bind_address === '0.0.0.0', `${where}: --bind_address=${effective.bind_address} is not reachable from other pods`);
  for (const probeName of ['startupProbe', 'readinessProbe', 'livenessProbe']) {
    const probe = c[probeName];
    if (probeName === 'startupProbe' && !probe) continue;
    check(probe && probe.grpc, `${where}: ${probeName} must be a native gRPC probe (grpc.health.v1)`);
    if (probe && probe.grpc) {
      check(probe.grpc.port === grpcPort, `${where}: ${probeName}.grpc.port ${probe.grpc.port} != --grpc_port ${grpcPort}`);
      check(!probe.grpc.service, `${where}: ${probeName} must check the overall health ("" service)`);
    }
  }
  const ann = ctx.obj.spec.template.metadata.annotations || {};
  check(ann['prometheus.io/scrape'] === 'true' && Number(ann['prometheus.io/port']) === metricsPort,
    `${where}: prometheus.io annotations (${ann['prometheus.io/port']}) != --metrics_port ${metricsPort}`);

  // 3. Addresses of other components name real Services on the right port.
  const peers = { cache_service: 'cache_service', redis: 'redis' };
  for (const [flag, peer] of Object.entries(peers)) {
    if (!(flag in defaults)) continue;
    check(setInManifest.has(flag), `${where}: --${flag} is not set (the default ${defaults[flag]} is not a Kubernetes address)`);
    const target = serviceFor(objs, effective[flag], obj.metadata.namespace);
    check(target !== null, `${where}: --${flag}=${effective[flag]} names no Service of the manifests`);
    if (!target) continue;
    const sp = target.svc.spec.ports.find((p) => p.port === target.port);
    check(sp !== undefined, `${where}: --${flag}=${effective[flag]}: Service ${target.svc.metadata.name} has no port ${target.port}`);
    const backends = podsOf(objs, target.svc);
    check(backends.length === 1, `${where}: --${flag}: Service ${target.svc.metadata.name} selects ${backends.length} workloads`);
    if (sp && backends.length === 1) {
      const bc = backends[0].spec.template.spec.containers[0];
      if (peer === 'cache_service') {
        check((bc.command || [])[0] === '/usr/local/bin/cache_service',
          `${where}: --${flag} points at ${backends[0].metadata.name}, not the cache service`);
        const cacheFlags = ctx.effectiveByWorkload[backends[0].metadata.name];
        if (cacheFlags) {
          check(resolvePort(bc, sp.targetPort) === Number(cacheFlags.grpc_port),
            `${where}: --${flag} reaches port ${resolvePort(bc, sp.targetPort)}, the cache service listens on ${cacheFlags.grpc_port}`);
        }
      } else {
        check(/redis/.test(bc.image), `${where}: --${flag} points at ${backends[0].metadata.name}, not Redis`);
        check(resolvePort(bc, sp.targetPort) === ctx.redisPort,
          `${where}: --${flag} reaches port ${resolvePort(bc, sp.targetPort)}, redis.conf says ${ctx.redisPort}`);
      }
    }
  }

  // 4. Workers announce their own pod address and name.
  if (proc === 'worker') {
    const envSrc = Object.fromEntries((c.env || []).filter((e) => e.valueFrom).map((e) => [e.name, e.valueFrom.fieldRef.fieldPath]));
    if ('advertise_address' in defaults) {
      const raw = [...(c.args || [])].find((a) => /^--advertise_address=/.test(a)) || '';
      const m = /^--advertise_address=\$\((\w+)\)(?::(\d+))?$/.exec(raw);
      check(m && envSrc[m[1]] === 'status.podIP',
        `${where}: --advertise_address must come from the downward API (status.podIP), got "${raw}"`);
      if (m && m[2] !== undefined) check(Number(m[2]) === grpcPort, `${where}: --advertise_address port ${m[2]} != --grpc_port ${grpcPort}`);
    } else {
      // Not a failure of the manifests: reported until worker/main.cc has it.
      console.log(`WARN ${where}: the worker binary has no --advertise_address flag yet; ` +
        'workers must announce their pod IP (status.podIP) to the cache service');
    }
    if ('worker_id' in defaults) {
      const raw = [...(c.args || [])].find((a) => /^--worker_id=/.test(a)) || '';
      const m = /^--worker_id=\$\((\w+)\)$/.exec(raw);
      check(m && envSrc[m[1]] === 'metadata.name', `${where}: --worker_id must be the pod name (metadata.name), got "${raw}"`);
    }
  }

  // 5. Termination grace covers preStop + drain.
  const pre = c.lifecycle && c.lifecycle.preStop;
  const preStopS = pre ? (pre.sleep ? pre.sleep.seconds : NaN) : 0;
  check(!Number.isNaN(preStopS), `${where}: preStop must be a sleep action (the image has no shell tools to run)`);
  const drain = drainBudget(proc, effective);
  const grace = podSpec.terminationGracePeriodSeconds === undefined ? 30 : podSpec.terminationGracePeriodSeconds;
  check(grace >= preStopS + drain.seconds + GRACE_MARGIN_S,
    `${where}: terminationGracePeriodSeconds ${grace} < preStop ${preStopS} s + drain ${drain.seconds} s (${drain.source}) + ${GRACE_MARGIN_S} s`);
  if (ctx.overlay !== 'selftest') {
    console.log(`  ${where}: grace ${grace} s >= preStop ${preStopS} s + drain ${drain.seconds} s (${drain.source}) + ${GRACE_MARGIN_S} s`);
  }

  // 6. The image builds this binary at this path and exposes these ports.
  const repo = c.image.replace(/[:@].*$/, '');
  const src = IMAGE_SOURCES[repo];
  check(src !== undefined, `${where}: image ${c.image} is built by no Dockerfile in deploy/docker`);
  if (src) {
    const t = dockerTargets(src[0])[src[1]];
    check(t !== undefined, `${where}: ${src[0]} has no target ${src[1]}`);
    if (t) {
      check(t.copies.includes(c.command[0]), `${where}: ${src[0]} target ${src[1]} does not install ${c.command[0]}`);
      check(JSON.stringify(t.entrypoint) === JSON.stringify([c.command[0]]), `${where}: ${src[0]} ${src[1]} ENTRYPOINT ${JSON.stringify(t.entrypoint)}`);
      check(t.exposes.includes(Number(defaults.grpc_port)) && t.exposes.includes(Number(defaults.metrics_port)),
        `${where}: ${src[0]} ${src[1]} EXPOSE ${t.exposes} lacks the default ports ${defaults.grpc_port} ${defaults.metrics_port}`);
      check(/^\d+(:\d+)?$/.test(t.user || '') && !/^0(:|$)/.test(t.user), `${where}: ${src[0]} ${src[1]} must run as a numeric non-root USER (got ${t.user})`);
      // Processes that tokenize dlopen the sentencepiece plug-in: the image
      // must ship it and point RADIXKV_SENTENCEPIECE_PLUGIN at it.
      if ('model_dir' in defaults) {
        const plugin = t.env.RADIXKV_SENTENCEPIECE_PLUGIN;
        check(plugin && t.copies.includes(plugin),
          `${where}: ${src[0]} ${src[1]} does not ship the tokenizer plug-in at RADIXKV_SENTENCEPIECE_PLUGIN (${plugin})`);
      }
    }
  }
  const sc = c.securityContext || {};
  const psc = podSpec.securityContext || {};
  check(psc.runAsNonRoot === true && sc.allowPrivilegeEscalation === false, `${where}: must run as non-root without privilege escalation`);
  return effective;
}

function checkRedis(ctx, c) {
  const { objs, podSpec, where } = ctx;
  const confPath = c.command[1];
  check(c.command[0] === 'redis-server' && c.command.length === 2, `${where}: expected [redis-server, <conf>], got ${c.command}`);
  const conf = configMapFile(objs, podSpec, c, confPath);
  check(conf !== null, `${where}: ${confPath} is not in a mounted ConfigMap`);
  if (!conf) return;
  const dir = fs.mkdtempSync(path.join(tmpRoot, 'redis-'));
  // redis-server chdirs to `dir` while it reads the file: point it at the
  // test's folder (the manifest's value is checked against the PVC below).
  fs.writeFileSync(path.join(dir, 'redis.conf'), conf.text.replace(/^dir\s+\S+/m, `dir ${dir}`));
  // A short socket path (sun_path holds 108 bytes; TEST_TMPDIR is long).
  const sockDir = fs.mkdtempSync('/tmp/rkv-redis-');
  const sock = path.join(sockDir, 'redis.sock');
  const logFile = path.join(dir, 'redis.log');
  // The manifest's config, with the network and data dir moved into the test.
  const { spawn } = require('child_process');
  const server = spawn('/usr/bin/redis-server', [path.join(dir, 'redis.conf'), '--port', '0', '--unixsocket', sock,
    '--dir', dir, '--daemonize', 'no', '--logfile', logFile], { stdio: 'ignore' });
  const readLog = () => (fs.existsSync(logFile) ? fs.readFileSync(logFile, 'utf8') : '');
  const cli = (...args) => spawnSync('/usr/bin/redis-cli', ['-s', sock, ...args], { encoding: 'utf8' });
  const deadline = Date.now() + 10000;
  while (Date.now() < deadline && cli('PING').stdout.trim() !== 'PONG') spawnSync('sleep', ['0.05']);
  const get = (k) => cli('CONFIG', 'GET', k).stdout.trim().split('\n')[1];
  check(cli('PING').stdout.trim() === 'PONG', `${where}: redis-server did not start with the manifest's redis.conf: ${readLog()}`);
  check(get('appendonly') === 'yes', `${where}: redis.conf must turn the append-only file on (appendonly ${get('appendonly')})`);
  const confPort = Number((/^port\s+(\d+)/m.exec(conf.text) || [])[1]);
  ctx.redisPort = confPort;
  check(resolvePort(c, 'redis') === confPort, `${where}: containerPort "redis" != redis.conf port ${confPort}`);
  const dataMount = (c.volumeMounts || []).find((m) => m.name === 'data');
  const confDir = (/^dir\s+(\S+)/m.exec(conf.text) || [])[1];
  check(dataMount && dataMount.mountPath === confDir, `${where}: redis.conf dir ${confDir} is not the PVC mount`);
  check((ctx.obj.spec.volumeClaimTemplates || []).some((t) => t.metadata.name === 'data'), `${where}: Redis has no PersistentVolumeClaim`);
  server.kill('SIGTERM');
  spawnSync('sleep', ['0.2']);
  fs.rmSync(sockDir, { recursive: true, force: true });
}

function checkOtherContainer(ctx, c) {
  const { where, podSpec } = ctx;
  // The model staging copy: from the path the worker image ships the model
  // at, into the volume that the worker mounts read-only.
  const ok = c.name === 'stage-model' && c.command[0] === '/bin/cp' && c.command.length === 4;
  check(ok, `${where}: container ${c.name} runs ${JSON.stringify(c.command)}, which no check covers`);
  if (!ok) return;
  const [, , from, to] = c.command;
  const t = dockerTargets('Dockerfile').worker;
  check(t.copies.some((d) => d.startsWith(from.replace(/\.$/, ''))), `${where}: the worker image has nothing under ${from}`);
  const vm = (c.volumeMounts || []).find((m) => `${m.mountPath}/` === to);
  check(vm !== undefined, `${where}: ${to} is not a volume mount`);
  const worker = podSpec.containers.find((x) => x.name === 'worker');
  const wm = vm && worker.volumeMounts.find((m) => m.name === vm.name);
  check(wm && wm.readOnly === true, `${where}: the worker must mount the model volume read-only`);
}

function checkOverlay(overlay) {
  const objs = render(path.join(deployDir, 'k8s', 'overlays', overlay));
  const ctx = { overlay, objs, effectiveByWorkload: {}, redisPort: undefined };
  const workloads = objs.filter((o) => ['Deployment', 'StatefulSet'].includes(o.kind));
  // Redis first, then the cache service, so that peers can be checked.
  const order = (o) => {
    const cmd = (o.spec.template.spec.containers[0].command || [])[0] || '';
    return cmd === 'redis-server' ? 0 : cmd.endsWith('/cache_service') ? 1 : 2;
  };
  workloads.sort((a, b) => order(a) - order(b));
  const seen = new Set();
  for (const obj of workloads) {
    const podSpec = obj.spec.template.spec;
    // Volumes: unique names (overlays patch them by index), every mount
    // names one of them.
    const volumeNames = (podSpec.volumes || []).map((v) => v.name);
    check(new Set(volumeNames).size === volumeNames.length, `${overlay}: ${obj.metadata.name}: duplicate volume names ${volumeNames}`);
    const claims = (obj.spec.volumeClaimTemplates || []).map((t) => t.metadata.name);
    for (const c of podContainers(obj)) {
      for (const m of c.volumeMounts || []) {
        check(volumeNames.includes(m.name) || claims.includes(m.name),
          `${overlay}: ${obj.metadata.name} container ${c.name} mounts unknown volume ${m.name}`);
      }
    }
    for (const c of podContainers(obj)) {
      const where = `${overlay}: ${obj.kind}/${obj.metadata.name} container ${c.name}`;
      Object.assign(ctx, { obj, podSpec, where });
      const cmd = (c.command || [])[0] || '';
      const proc = /^\/usr\/local\/bin\/(\w+)$/.exec(cmd);
      if (proc && PROCESSES.includes(proc[1])) {
        seen.add(proc[1]);
        ctx.effectiveByWorkload[obj.metadata.name] = checkRadixkvContainer(ctx, c, proc[1]);
      } else if (cmd === 'redis-server') {
        checkRedis(ctx, c);
      } else {
        checkOtherContainer(ctx, c);
      }
    }
  }
  check(seen.size === PROCESSES.length, `${overlay}: runs ${[...seen]}, not all of ${PROCESSES}`);

  // Every Service port: targetPort is a container port of the selected pods
  // and equals the port; for radixkv pods it is an effective flag value.
  for (const svc of objs.filter((o) => o.kind === 'Service')) {
    const backends = podsOf(objs, svc);
    check(backends.length === 1, `${overlay}: Service ${svc.metadata.name} selects ${backends.length} workloads`);
    if (backends.length !== 1) continue;
    const w = backends[0];
    const c = w.spec.template.spec.containers[0];
    const flags = ctx.effectiveByWorkload[w.metadata.name];
    for (const p of svc.spec.ports) {
      const target = resolvePort(c, p.targetPort === undefined ? p.port : p.targetPort);
      const where = `${overlay}: Service ${svc.metadata.name} port ${p.name}`;
      check(target === p.port, `${where}: port ${p.port} -> container port ${target}`);
      if (flags) {
        const flag = { grpc: 'grpc_port', http: 'http_port', metrics: 'metrics_port' }[p.name];
        check(flag !== undefined && Number(flags[flag]) === p.port,
          `${where}: ${p.port} matches no listening flag of ${w.metadata.name} (grpc_port ${flags.grpc_port}, http_port ${flags.http_port}, metrics_port ${flags.metrics_port})`);
      }
    }
  }
  return ctx;
}

/**
 * HPA, PDBs and the scrape configuration (ServiceMonitor, prometheus.yml)
 * against the workloads and Services of an overlay.
 */
function checkPolicyAndMonitoring(overlay, objs) {
  const workloads = objs.filter((o) => ['Deployment', 'StatefulSet'].includes(o.kind));
  const selects = (selector, o) => Object.entries(selector.matchLabels || {})
    .every(([k, v]) => (o.spec.template.metadata.labels || {})[k] === v);
  for (const hpa of objs.filter((o) => o.kind === 'HorizontalPodAutoscaler')) {
    const ref = hpa.spec.scaleTargetRef;
    const target = workloads.find((w) => w.kind === ref.kind && w.metadata.name === ref.name);
    check(target !== undefined, `${overlay}: HPA ${hpa.metadata.name} targets missing ${ref.kind}/${ref.name}`);
    if (!target) continue;
    for (const m of hpa.spec.metrics.filter((x) => x.type === 'Resource')) {
      for (const c of target.spec.template.spec.containers) {
        check(((c.resources || {}).requests || {})[m.resource.name] !== undefined,
          `${overlay}: HPA ${hpa.metadata.name} scales on ${m.resource.name} but container ${c.name} requests none`);
      }
    }
    check(hpa.spec.minReplicas <= target.spec.replicas && target.spec.replicas <= hpa.spec.maxReplicas,
      `${overlay}: ${ref.name} replicas ${target.spec.replicas} outside the HPA's [${hpa.spec.minReplicas}, ${hpa.spec.maxReplicas}]`);
  }
  for (const pdb of objs.filter((o) => o.kind === 'PodDisruptionBudget')) {
    const hits = workloads.filter((w) => selects(pdb.spec.selector, w));
    check(hits.length === 1, `${overlay}: PDB ${pdb.metadata.name} selects ${hits.length} workloads`);
  }
  for (const w of workloads) {
    check(objs.some((o) => o.kind === 'PodDisruptionBudget' && selects(o.spec.selector, w)), `${overlay}: ${w.metadata.name} has no PodDisruptionBudget`);
  }
  // NetworkPolicies: each selects one workload; every allowed peer selects
  // one workload; allowed ports are container ports of the selected pods.
  for (const np of objs.filter((o) => o.kind === 'NetworkPolicy')) {
    const hits = workloads.filter((w) => selects(np.spec.podSelector, w));
    check(hits.length === 1, `${overlay}: NetworkPolicy ${np.metadata.name} selects ${hits.length} workloads`);
    for (const rule of np.spec.ingress || []) {
      for (const peer of rule.from || []) {
        const peers = workloads.filter((w) => selects(peer.podSelector, w));
        check(peers.length === 1, `${overlay}: NetworkPolicy ${np.metadata.name} admits ${peers.length} workloads`);
      }
      for (const p of rule.ports || []) {
        check(hits.length === 1 && hits[0].spec.template.spec.containers.some((c) => resolvePort(c, p.port) !== undefined &&
          (c.ports || []).some((cp) => cp.containerPort === resolvePort(c, p.port))),
        `${overlay}: NetworkPolicy ${np.metadata.name} port ${p.port} is no container port of its pods`);
      }
    }
  }
  // Redis: the cache service can reach it.
  const redisPolicy = objs.find((o) => o.kind === 'NetworkPolicy' && o.metadata.name === 'radixkv-redis');
  check(redisPolicy && redisPolicy.spec.ingress.some((r) => r.from.some((p) => p.podSelector.matchLabels['app.kubernetes.io/name'] === 'radixkv-cache-service')),
    `${overlay}: the Redis NetworkPolicy must admit the cache service`);

  // ServiceMonitor: the Services it selects are exactly one per radixkv
  // process, each with a `metrics` port and the label that becomes the job.
  const monitoring = render(path.join(deployDir, 'k8s', 'monitoring'));
  const sm = monitoring.find((o) => o.kind === 'ServiceMonitor');
  const scraped = objs.filter((o) => o.kind === 'Service' && o.metadata.namespace === sm.spec.namespaceSelector.matchNames[0] &&
    Object.entries(sm.spec.selector.matchLabels).every(([k, v]) => (o.metadata.labels || {})[k] === v));
  const jobs = scraped.map((o) => o.metadata.labels[sm.spec.jobLabel]).sort();
  check(JSON.stringify(jobs) === JSON.stringify(['radixkv-cache-service', 'radixkv-router', 'radixkv-worker']),
    `${overlay}: the ServiceMonitor scrapes Services with jobs ${jobs}`);
  for (const svc of scraped) {
    check(svc.spec.ports.some((p) => p.name === sm.spec.endpoints[0].port), `${overlay}: Service ${svc.metadata.name} has no port ${sm.spec.endpoints[0].port}`);
  }

  // prometheus.yml: each job's SRV name is a headless Service with a
  // `metrics` port selecting that job's pods.
  const YAML = require('yaml');
  const prom = YAML.parse(fs.readFileSync(path.join(deployDir, 'monitoring', 'prometheus.yml'), 'utf8'));
  for (const job of prom.scrape_configs) {
    for (const sd of job.dns_sd_configs || []) {
      for (const name of sd.names) {
        const m = /^_([a-z0-9-]+)\._tcp\.([a-z0-9-]+)\.([a-z0-9-]+)\.svc\.cluster\.local$/.exec(name);
        check(m !== null && sd.type === 'SRV', `prometheus.yml ${job.job_name}: ${name} is not an SRV name of a Service`);
        if (!m) continue;
        const svc = objs.find((o) => o.kind === 'Service' && o.metadata.name === m[2] && o.metadata.namespace === m[3]);
        check(svc !== undefined, `${overlay}: prometheus.yml ${job.job_name}: no Service ${m[2]} in namespace ${m[3]}`);
        if (!svc) continue;
        check(svc.spec.clusterIP === 'None', `${overlay}: prometheus.yml ${job.job_name}: Service ${m[2]} is not headless (one SRV record per pod)`);
        check(svc.spec.ports.some((p) => p.name === m[1]), `${overlay}: Service ${m[2]} has no port named ${m[1]}`);
        check(svc.spec.selector['app.kubernetes.io/name'] === job.job_name, `${overlay}: Service ${m[2]} does not select the pods of job ${job.job_name}`);
      }
    }
  }
}

function selfTests() {
  // The check fails where it must: a flag the binary does not have, a probe
  // on the metrics port, a Service port that no flag sets, a worker that
  // does not announce its pod IP, a grace period shorter than the drain.
  const base = render(path.join(deployDir, 'k8s', 'overlays', 'cpu-demo'));
  const mutate = (fn) => {
    const objs = JSON.parse(JSON.stringify(base));
    fn(objs);
    return objs;
  };
  const find = (objs, kind, name) => objs.find((o) => o.kind === kind && o.metadata.name === name);
  // Runs the radixkv container checks over a (mutated) object list and
  // returns what they reported, without counting it as failures.
  const runWith = (objs) => {
    const saved = failures;
    const ctx = { overlay: 'selftest', objs, effectiveByWorkload: {}, redisPort: 6379 };
    const workloads = objs.filter((o) => ['Deployment', 'StatefulSet'].includes(o.kind) && o.metadata.name !== 'radixkv-redis');
    const captured = [];
    const origLog = console.log;
    console.log = (m) => captured.push(m);
    try {
      for (const obj of workloads) {
        const podSpec = obj.spec.template.spec;
        for (const c of podSpec.containers) {
          const proc = /^\/usr\/local\/bin\/(\w+)$/.exec(c.command[0])[1];
          Object.assign(ctx, { obj, podSpec, where: `selftest ${obj.metadata.name}` });
          ctx.effectiveByWorkload[obj.metadata.name] = checkRadixkvContainer(ctx, c, proc);
        }
      }
    } finally {
      console.log = origLog;
      failures = saved;
    }
    return captured.filter((m) => m.startsWith('FAIL')).join('\n');
  };
  const clean = runWith(mutate(() => {}));
  const expectFail = (name, fn, re) => {
    const out = runWith(mutate(fn));
    assert.match(out, re, `self-test "${name}" did not fail as expected; got:\n${out}`);
    console.log(`self-test ok: ${name}`);
  };
  expectFail('unknown flag', (o) => { find(o, 'Deployment', 'radixkv-router').spec.template.spec.containers[0].args.push('--no_such_flag=1'); },
    /selftest radixkv-router: `router\/router .*--no_such_flag=1 --check_flags` -> exit 1: .*Unknown command line flag 'no_such_flag'/);
  expectFail('invalid flag value', (o) => {
    const cm = find(o, 'ConfigMap', 'radixkv-router-flags');
    cm.data['router.flags'] = cm.data['router.flags'].replace('--metrics_port=9100', '--metrics_port=70000');
  }, /-> exit 2: invalid flags: --metrics_port must be in \[0, 65535\]/);
  expectFail('probe on the metrics port', (o) => {
    find(o, 'StatefulSet', 'radixkv-cache-service').spec.template.spec.containers[0].readinessProbe.grpc.port = 9101;
  }, /readinessProbe.grpc.port 9101 != --grpc_port 50051/);
  expectFail('http probe', (o) => {
    find(o, 'StatefulSet', 'radixkv-worker').spec.template.spec.containers[0].livenessProbe = { tcpSocket: { port: 50061 } };
  }, /livenessProbe must be a native gRPC probe/);
  expectFail('flag moved, container port not', (o) => {
    const cm = find(o, 'ConfigMap', 'radixkv-worker-flags');
    cm.data['worker.flags'] = cm.data['worker.flags'].replace('--grpc_port=50061', '--grpc_port=50071');
  }, /containerPort "grpc" 50061 != --grpc_port 50071/);
  expectFail('grace period shorter than the drain', (o) => {
    find(o, 'Deployment', 'radixkv-router').spec.template.spec.terminationGracePeriodSeconds = 6;
  }, /terminationGracePeriodSeconds 6 < preStop 5 s \+ drain/);
  expectFail('image without the binary', (o) => {
    find(o, 'Deployment', 'radixkv-router').spec.template.spec.containers[0].image = 'radixkv/worker:dev';
  }, /Dockerfile target worker does not install \/usr\/local\/bin\/router/);
  if ('advertise_address' in flagDefaults('worker')) {
    expectFail('worker address not from the downward API', (o) => {
      const c = find(o, 'StatefulSet', 'radixkv-worker').spec.template.spec.containers[0];
      c.args = c.args.map((a) => a.replace(/^--advertise_address=.*/, '--advertise_address=radixkv-worker:50061'));
    }, /--advertise_address must come from the downward API/);
  }
  const redisObjs = mutate((o) => {
    const cm = find(o, 'ConfigMap', 'radixkv-redis-config');
    cm.data['redis.conf'] = cm.data['redis.conf'].replace('appendonly yes', 'appendonly no');
  });
  const saved = failures;
  const captured = [];
  const origLog = console.log;
  console.log = (m) => captured.push(m);
  try {
    const obj = find(redisObjs, 'StatefulSet', 'radixkv-redis');
    checkRedis({ overlay: 'selftest', objs: redisObjs, obj, podSpec: obj.spec.template.spec, where: 'selftest redis' },
      obj.spec.template.spec.containers[0]);
  } finally {
    console.log = origLog;
    failures = saved;
  }
  assert.deepStrictEqual(captured, ['FAIL selftest redis: redis.conf must turn the append-only file on (appendonly no)']);
  console.log('self-test ok: redis without the append-only file');
  return clean;
}

function main() {
  for (const p of PROCESSES) {
    assert.ok(fs.existsSync(path.join(binDir, p, p)), `binary ${p} not found under ${binDir}`);
    console.log(`${p}: ${Object.keys(flagDefaults(p)).length} flags (defaults from --helpfull)`);
  }
  for (const [image, [, , binary]] of Object.entries(IMAGE_SOURCES)) {
    if (!binary) continue;
    assert.ok(fs.existsSync(path.join(binDir, binary)),
      `${binary} (the binary of the ${image} image) not found under ${binDir}: ` +
      `bazel build ${bazelLabel(binary)}`);
  }
  const clean = selfTests();
  assert.strictEqual(clean, '', `self-test baseline (cpu-demo as written) is not clean:\n${clean}`);

  for (const overlay of ['cpu-demo', 'gpu', 'gpu-rocm']) {
    const before = failures;
    const ctx = checkOverlay(overlay);
    checkPolicyAndMonitoring(overlay, ctx.objs);
    const runs = Object.keys(ctx.effectiveByWorkload).length;
    console.log(`  ${overlay}: binaries run: ${[...ctx.binaries].sort().join(', ')}`);
    console.log(`${overlay}: ${runs} radixkv command lines accepted by --check_flags; ` +
      `${failures === before ? 'ports, probes, Services, peers, grace periods, HPA, PDBs, scrape config consistent' : `${failures - before} problems`}`);
  }
  console.log(`${checks} checks, ${failures} failed`);
  process.exit(failures ? 1 : 0);
}

main();
