// Schema checks of Kubernetes objects with the npm package kubernetes-models
// (the OpenAPI schemas of Kubernetes compiled to validators) and, for the
// Prometheus Operator's ServiceMonitor, @kubernetes-models/prometheus-operator.
//
// kubernetes-models catches wrong types, missing required fields and bad
// enum values, but it accepts fields that do not exist (a typo such as
// `replicass` or a probe's `prot`). Kubernetes' API server would drop or
// reject them, so unknownFields() finds them: the object is validated
// through a recording Proxy, and every key that the schema validator never
// read is unknown to the schema (the compiled validators read each declared
// property, and iterate every key of free-form maps such as labels).
'use strict';

// apiVersion -> module that exports one model class per kind.
const MODEL_MODULES = {
  'v1': 'kubernetes-models/v1',
  'apps/v1': 'kubernetes-models/apps/v1',
  'policy/v1': 'kubernetes-models/policy/v1',
  'autoscaling/v2': 'kubernetes-models/autoscaling/v2',
  'batch/v1': 'kubernetes-models/batch/v1',
  'networking.k8s.io/v1': 'kubernetes-models/networking.k8s.io/v1',
  'rbac.authorization.k8s.io/v1': 'kubernetes-models/rbac.authorization.k8s.io/v1',
  'monitoring.coreos.com/v1': '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1',
};

/** The kubernetes-models class for an object's apiVersion and kind. */
function modelClass(obj) {
  const mod = MODEL_MODULES[obj.apiVersion];
  if (!mod) throw new Error(`no schema module for apiVersion ${obj.apiVersion}`);
  const cls = require(mod)[obj.kind];
  if (!cls) throw new Error(`no schema for ${obj.apiVersion} ${obj.kind}`);
  return cls;
}

/**
 * Validates `obj` against its schema. Returns a list of problems (strings,
 * empty when valid): schema violations and unknown fields, each with the
 * JSON path of the offending value.
 */
function checkObject(obj) {
  const problems = [];
  let cls;
  try {
    cls = modelClass(obj);
  } catch (e) {
    return [e.message];
  }
  const accessed = new Set();
  const wrap = (value, ptr) => {
    if (value === null || typeof value !== 'object') return value;
    return new Proxy(value, {
      get(target, key, receiver) {
        const v = Reflect.get(target, key, receiver);
        if (typeof key !== 'string') return v;
        accessed.add(`${ptr}/${key}`);
        return wrap(v, `${ptr}/${key}`);
      },
    });
  };
  try {
    cls.prototype.validate.call(wrap(obj, ''));
  } catch (e) {
    const details = (e.errors || []).map((x) => `${x.instancePath || '/'} ${x.message}`);
    problems.push(`schema: ${details.length ? details.join('; ') : e.message}`);
  }
  for (const u of unknownFields(obj, accessed)) problems.push(`unknown field ${u}`);
  return problems;
}

function unknownFields(obj, accessed) {
  const out = [];
  const walk = (v, ptr) => {
    if (v === null || typeof v !== 'object') return;
    for (const key of Object.keys(v)) {
      const p = `${ptr}/${key}`;
      if (!Array.isArray(v) && !accessed.has(p)) {
        out.push(p);  // its own contents are unknown too; report the top only
        continue;
      }
      walk(v[key], p);
    }
  };
  walk(obj, '');
  return out;
}

/** "Kind/name" for messages. */
function objectId(obj) {
  return `${obj.kind}/${obj.metadata && obj.metadata.name}`;
}

module.exports = { checkObject, objectId, modelClass };
