// Renders a Kustomize directory (deploy/k8s/...) offline, for the checks in
// this folder: there is no kustomize or kubectl on the CI machines.
//
// Supports exactly the kustomization fields radixkv's manifests use and fails
// on any other, so that the rendered output cannot silently differ from what
// `kubectl kustomize` produces:
//   resources   files (multi-document YAML) and directories with a
//               kustomization.yaml, rendered recursively (bottom-up, like
//               kustomize)
//   patches     JSON 6902 operations (add, remove, replace) given inline
//               (`patch:`) or by file (`path:`), applied to `target` (kind,
//               name, optional group/version/namespace/labelSelector-free)
//   namespace   set on every namespaced object
//   labels      `pairs` added to metadata.labels (no includeSelectors)
//   images      name -> newName / newTag / digest on containers and
//               initContainers of pod templates
//
// CLI: node kustomize_render.js DIR  -> the rendered YAML stream on stdout;
//      node kustomize_render.js DIR Kind/name /json/pointer -> one value.
'use strict';

const fs = require('fs');
const path = require('path');
const YAML = require('yaml');

const SUPPORTED_FIELDS = new Set([
  'apiVersion', 'kind', 'resources', 'patches', 'namespace', 'labels', 'images',
]);

// Kinds that are not namespaced (the namespace transformer leaves them alone).
const CLUSTER_SCOPED = new Set([
  'Namespace', 'ClusterRole', 'ClusterRoleBinding', 'PersistentVolume',
  'StorageClass', 'CustomResourceDefinition', 'PriorityClass',
]);

/** Parses a multi-document YAML file into plain objects (nulls skipped). */
function loadYamlStream(file) {
  const docs = YAML.parseAllDocuments(fs.readFileSync(file, 'utf8'));
  const out = [];
  for (const doc of docs) {
    if (doc.errors.length) {
      throw new Error(`${file}: ${doc.errors.map((e) => e.message).join('; ')}`);
    }
    const obj = doc.toJS();
    if (obj !== null && obj !== undefined) out.push(obj);
  }
  return out;
}

/** Splits a JSON pointer (RFC 6901) into unescaped tokens. */
function pointerTokens(pointer) {
  if (pointer === '') return [];
  if (!pointer.startsWith('/')) throw new Error(`bad JSON pointer ${pointer}`);
  return pointer.slice(1).split('/').map((t) => t.replace(/~1/g, '/').replace(/~0/g, '~'));
}

/** Applies JSON 6902 operations (add, remove, replace) to `doc` in place. */
function applyJson6902(doc, ops, where) {
  if (!Array.isArray(ops)) throw new Error(`${where}: a patch must be a list of JSON 6902 operations`);
  for (const op of ops) {
    const tokens = pointerTokens(op.path);
    if (tokens.length === 0) throw new Error(`${where}: cannot patch the document root`);
    let parent = doc;
    for (const t of tokens.slice(0, -1)) {
      if (parent === null || typeof parent !== 'object' || !(t in parent)) {
        throw new Error(`${where}: path ${op.path} does not exist`);
      }
      parent = parent[t];
    }
    const last = tokens[tokens.length - 1];
    const clone = (v) => JSON.parse(JSON.stringify(v));
    if (op.op === 'add') {
      if (Array.isArray(parent)) {
        const i = last === '-' ? parent.length : Number(last);
        if (!Number.isInteger(i) || i < 0 || i > parent.length) throw new Error(`${where}: bad index in ${op.path}`);
        parent.splice(i, 0, clone(op.value));
      } else {
        parent[last] = clone(op.value);
      }
    } else if (op.op === 'replace' || op.op === 'remove') {
      const exists = Array.isArray(parent)
        ? Number(last) >= 0 && Number(last) < parent.length
        : parent !== null && typeof parent === 'object' && last in parent;
      if (!exists) throw new Error(`${where}: ${op.op} of missing path ${op.path}`);
      if (op.op === 'remove') {
        if (Array.isArray(parent)) parent.splice(Number(last), 1); else delete parent[last];
      } else {
        parent[last] = clone(op.value);
      }
    } else {
      throw new Error(`${where}: unsupported JSON 6902 op "${op.op}" (supported: add, remove, replace)`);
    }
  }
}

function matchesTarget(obj, target) {
  const known = new Set(['kind', 'name', 'namespace', 'group', 'version']);
  for (const k of Object.keys(target)) {
    if (!known.has(k)) throw new Error(`unsupported patch target field "${k}"`);
  }
  const [group, version] = obj.apiVersion.includes('/') ? obj.apiVersion.split('/') : ['', obj.apiVersion];
  if (target.kind !== undefined && target.kind !== obj.kind) return false;
  if (target.name !== undefined && target.name !== obj.metadata.name) return false;
  if (target.namespace !== undefined && target.namespace !== obj.metadata.namespace) return false;
  if (target.group !== undefined && target.group !== group) return false;
  if (target.version !== undefined && target.version !== version) return false;
  return true;
}

/** Pod template containers of a workload (empty for other kinds). */
function podContainers(obj) {
  const spec = obj.spec && obj.spec.template && obj.spec.template.spec;
  if (!spec) return [];
  return [...(spec.initContainers || []), ...(spec.containers || [])];
}

function applyImages(objs, images) {
  for (const img of images) {
    for (const obj of objs) {
      for (const c of podContainers(obj)) {
        const m = /^([^:@]+)(?::([^@]+))?(?:@(.+))?$/.exec(c.image);
        if (!m || m[1] !== img.name) continue;
        let name = img.newName || m[1];
        let ref = m[2] ? `:${m[2]}` : (m[3] ? `@${m[3]}` : '');
        if (img.newTag) ref = `:${img.newTag}`;
        if (img.digest) ref = `@${img.digest}`;
        c.image = name + ref;
      }
    }
  }
}

/**
 * Renders the kustomization in `dir`. Returns the objects in kustomize's
 * resource order. Throws on an unsupported field, a patch matching nothing
 * or a duplicate object.
 */
function render(dir) {
  const kfile = path.join(dir, 'kustomization.yaml');
  const [k] = loadYamlStream(kfile);
  for (const key of Object.keys(k)) {
    if (!SUPPORTED_FIELDS.has(key)) {
      throw new Error(`${kfile}: kustomization field "${key}" is not supported by the offline renderer`);
    }
  }
  let objs = [];
  for (const r of k.resources || []) {
    const p = path.join(dir, r);
    if (fs.statSync(p).isDirectory()) objs.push(...render(p));
    else objs.push(...loadYamlStream(p));
  }
  const seen = new Set();
  for (const o of objs) {
    const id = `${o.apiVersion}/${o.kind}/${o.metadata && o.metadata.namespace || ''}/${o.metadata && o.metadata.name}`;
    if (seen.has(id)) throw new Error(`${kfile}: duplicate object ${id}`);
    seen.add(id);
  }
  for (const [i, p] of (k.patches || []).entries()) {
    const where = `${kfile} patches[${i}]`;
    for (const key of Object.keys(p)) {
      if (!['target', 'patch', 'path'].includes(key)) throw new Error(`${where}: unsupported field "${key}"`);
    }
    if (!p.target) throw new Error(`${where}: only targeted JSON 6902 patches are supported`);
    const text = p.patch !== undefined ? p.patch : fs.readFileSync(path.join(dir, p.path), 'utf8');
    const ops = YAML.parse(text);
    const hits = objs.filter((o) => matchesTarget(o, p.target));
    if (hits.length === 0) throw new Error(`${where}: target ${JSON.stringify(p.target)} matches no object`);
    for (const o of hits) applyJson6902(o, ops, where);
  }
  if (k.namespace) {
    for (const o of objs) {
      if (!CLUSTER_SCOPED.has(o.kind)) o.metadata.namespace = k.namespace;
    }
  }
  for (const l of k.labels || []) {
    for (const key of Object.keys(l)) {
      if (key !== 'pairs') throw new Error(`${kfile}: labels.${key} is not supported`);
    }
    for (const o of objs) o.metadata.labels = { ...(o.metadata.labels || {}), ...l.pairs };
  }
  applyImages(objs, k.images || []);
  return objs;
}

module.exports = { render, loadYamlStream, applyJson6902, podContainers };

if (require.main === module) {
  // node kustomize_render.js DIR [Kind/name /json/pointer]: the rendered
  // stream, or one value of one object.
  const objs = render(process.argv[2]);
  if (process.argv[3]) {
    const [kind, name] = process.argv[3].split('/');
    const obj = objs.find((o) => o.kind === kind && o.metadata.name === name);
    if (!obj) throw new Error(`no ${process.argv[3]} in ${process.argv[2]}`);
    const value = pointerTokens(process.argv[4] || '').reduce((v, t) => (v === undefined ? v : v[t]), obj);
    if (value === undefined) throw new Error(`${process.argv[3]} has no ${process.argv[4]}`);
    console.log(typeof value === 'object' ? JSON.stringify(value) : value);
  } else {
    process.stdout.write(objs.map((o) => YAML.stringify(o)).join('---\n'));
  }
}
