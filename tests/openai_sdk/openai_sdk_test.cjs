// radixkv's OpenAI-compatible HTTP API driven by the official OpenAI SDK for
// Node.js (npm package `openai`) against a live local cluster (cache
// service, two CPU workers with the embedded demo model, router with API
// keys): completions and chat, streamed and not, a second chat turn that
// reuses the first one's KV (usage.prompt_tokens_details.cached_tokens),
// stop strings, max_tokens, echo with the prompt's logprobs and vLLM's
// prompt_logprobs, an aborted stream that leaves no lease, every error class
// with its status code, keys required and refused.
//
// Environment: RADIXKV_LOCAL_CLUSTER (the launcher binary), NODE_PATH (the
// npm packages of tests/openai_sdk/package.json).
'use strict';

const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const test = require('node:test');

const openaiModule = require('openai');
const OpenAI = openaiModule.default || openaiModule.OpenAI || openaiModule;

const MODEL = 'radixkv-demo-llama';
const KEY = 'sk-radixkv-test-' + process.pid;

let cluster;   // the launcher process
let addr = {}; // addresses from the ready file
let client;    // the SDK with the right key

function sleep(ms) { return new Promise((r) => setTimeout(r, ms)); }

async function startCluster() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'radixkv-openai-'));
  const keys = path.join(dir, 'keys');
  fs.writeFileSync(keys, '# keys of the test\nsk-other\n' + KEY + '\n');
  const ready = path.join(dir, 'ready');
  cluster = spawn(process.env.RADIXKV_LOCAL_CLUSTER, [
    '--serve', '--ready_file=' + ready, '--run_dir=' + path.join(dir, 'run'),
    '--process_metrics', '--kv_capacity_tokens=1536',
    '--router_args=--api_keys_file=' + keys,
  ], { stdio: ['ignore', 'inherit', 'inherit'] });
  for (let i = 0; i < 1200 && !fs.existsSync(ready); ++i) {
    if (cluster.exitCode !== null) throw new Error('local_cluster exited');
    await sleep(100);
  }
  const lines = fs.readFileSync(ready, 'utf8').split('\n');
  addr = { router: lines[0], http: lines[2], routerMetrics: lines[3],
           cacheMetrics: lines[4] };
  client = new OpenAI({ apiKey: KEY, baseURL: `http://${addr.http}/v1`,
                        maxRetries: 0, timeout: 60000 });
}

// One value of a Prometheus text exposition, summed over label sets whose
// labels contain every `filter` substring.
async function metric(address, name, filter = []) {
  const text = await (await fetch(`http://${address}/metrics`)).text();
  let sum = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(name + '{') && !line.startsWith(name + ' ')) continue;
    if (!filter.every((f) => line.includes(f))) continue;
    sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return sum;
}

// Waits until every lease is released and the router has nothing in flight.
async function assertNothingHeld() {
  let leases = -1, inFlight = -1;
  for (let i = 0; i < 100; ++i) {
    leases = await metric(addr.cacheMetrics, 'radixkv_cache_active_leases');
    inFlight = await metric(addr.routerMetrics,
                            'radixkv_router_in_flight_requests');
    if (leases === 0 && inFlight === 0) return;
    await sleep(100);
  }
  assert.fail(`still held: ${leases} leases, ${inFlight} requests in flight`);
}

test.before(startCluster);
test.after(async () => {
  if (cluster && cluster.exitCode === null) {
    cluster.kill('SIGTERM');
    await new Promise((r) => cluster.once('exit', r));
  }
});

test('models lists the served model', async () => {
  const models = await client.models.list();
  assert.deepEqual(models.data.map((m) => m.id), [MODEL]);
  assert.equal(models.data[0].object, 'model');
});

test('completion: text, finish_reason length, usage', async () => {
  const r = await client.completions.create({
    model: MODEL, prompt: 'The license grants you', max_tokens: 8,
    temperature: 0,
  });
  assert.match(r.id, /^cmpl-[0-9a-f]{32}$/);
  assert.equal(r.object, 'text_completion');
  assert.equal(r.model, MODEL);
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].index, 0);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.ok(r.choices[0].text.length > 0);
  assert.equal(r.usage.completion_tokens, 8);
  assert.equal(r.usage.total_tokens,
               r.usage.prompt_tokens + r.usage.completion_tokens);
  assert.equal(typeof r.usage.prompt_tokens_details.cached_tokens, 'number');
});

test('completion stream equals the completion, usage chunk last', async () => {
  const params = { model: MODEL, prompt: 'Redistribution and use in source',
                   max_tokens: 10, temperature: 0 };
  const whole = await client.completions.create(params);
  const stream = await client.completions.create({
    ...params, stream: true, stream_options: { include_usage: true } });
  let text = '', finish = null, usage = null, chunks = 0;
  for await (const chunk of stream) {
    ++chunks;
    assert.equal(chunk.object, 'text_completion');
    if (chunk.choices.length > 0) {
      text += chunk.choices[0].text;
      if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
      assert.equal(chunk.usage, null);
    } else {
      usage = chunk.usage;
    }
  }
  assert.ok(chunks >= 3);
  assert.equal(text, whole.choices[0].text);
  assert.equal(finish, 'length');
  assert.equal(usage.completion_tokens, 10);
  // The second request found the first one's prompt in the cache.
  assert.ok(usage.prompt_tokens_details.cached_tokens > 0, usage);
});

test('a list of prompts gives one choice per prompt', async () => {
  const r = await client.completions.create({
    model: MODEL, prompt: ['Copyright', [1, 377, 419]], max_tokens: 3,
    temperature: 0 });
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1]);
  assert.equal(r.usage.completion_tokens, 6);
});

test('n samples with logprobs: one choice each, greedy ones equal', async () => {
  const one = await client.chat.completions.create({
    model: MODEL, max_tokens: 5, temperature: 0, ignore_eos: true,
    messages: [{ role: 'user', content: 'Name a license.' }] });
  const r = await client.chat.completions.create({
    model: MODEL, max_tokens: 5, temperature: 0, n: 2, logprobs: true,
    top_logprobs: 3, ignore_eos: true, messages: [{ role: 'user', content: 'Name a license.' }] });
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1]);
  for (const c of r.choices) {
    assert.equal(c.message.content, one.choices[0].message.content);
    assert.equal(c.logprobs.content.length, 5);
    for (const t of c.logprobs.content) {
      assert.ok(t.logprob <= 0, JSON.stringify(t));
      assert.equal(t.top_logprobs.length, 3);
      assert.equal(t.top_logprobs[0].token, t.token);  // greedy
    }
  }
  // The prompt is counted once for its samples.
  assert.equal(r.usage.prompt_tokens, one.usage.prompt_tokens);
  assert.equal(r.usage.completion_tokens, 10);
  const c = await client.completions.create({
    model: MODEL, prompt: 'Copyright', max_tokens: 4, temperature: 0, n: 2,
    logprobs: 2, ignore_eos: true });
  assert.deepEqual(c.choices.map((x) => x.index), [0, 1]);
  assert.equal(c.choices[0].logprobs.tokens.length, 4);
  assert.equal(c.choices[0].logprobs.token_logprobs.length, 4);
  assert.equal(Object.keys(c.choices[1].logprobs.top_logprobs[0]).length <= 2,
               true);
  await assertNothingHeld();
});

// A log probability the API answers: a finite number <= 0.
function assertLogprob(x, what) {
  assert.equal(typeof x, 'number', what);
  assert.ok(Number.isFinite(x) && x <= 0, `${what}: ${x}`);
}

test('completion echo with logprobs: the prompt, then the completion', async () => {
  const prompt = 'The license grants you';
  const params = { model: MODEL, prompt, max_tokens: 4, temperature: 0,
                   ignore_eos: true, logprobs: 2 };
  const plain = await client.completions.create(params);
  const r = await client.completions.create({ ...params, echo: true, n: 2 });
  // The prompt's tokens (BOS included), counted once for both samples.
  const promptTokens = r.usage.prompt_tokens;
  assert.equal(promptTokens, plain.usage.prompt_tokens);
  assert.ok(promptTokens >= 2, r.usage);
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1]);
  for (const c of r.choices) {
    assert.equal(c.text, prompt + plain.choices[0].text);
    const lp = c.logprobs;
    assert.equal(lp.tokens.length, promptTokens + 4);
    assert.equal(lp.token_logprobs.length, promptTokens + 4);
    assert.equal(lp.top_logprobs.length, promptTokens + 4);
    assert.equal(lp.text_offset.length, promptTokens + 4);
    // The first prompt token has no context: null, as OpenAI answers.
    assert.equal(lp.token_logprobs[0], null);
    assert.equal(lp.top_logprobs[0], null);
    assert.equal(lp.text_offset[0], 0);
    for (let i = 1; i < lp.tokens.length; ++i) {
      assertLogprob(lp.token_logprobs[i], `token_logprobs[${i}]`);
      const top = Object.values(lp.top_logprobs[i]);
      assert.ok(top.length >= 1 && top.length <= 2, JSON.stringify(lp.top_logprobs[i]));
      top.forEach((x) => assertLogprob(x, `top_logprobs[${i}]`));
      assert.ok(lp.text_offset[i] >= lp.text_offset[i - 1]);
    }
    // The completion's part is the completion's own.
    assert.deepEqual(lp.tokens.slice(promptTokens),
                     plain.choices[0].logprobs.tokens);
  }
  // Streamed: the first chunk carries the prompt's text and tokens.
  const stream = await client.completions.create({
    ...params, echo: true, stream: true });
  let text = '', first = null;
  for await (const chunk of stream) {
    if (chunk.choices.length === 0) continue;
    if (first === null) first = chunk.choices[0];
    text += chunk.choices[0].text;
  }
  assert.ok(first.text.startsWith(prompt), first.text);
  assert.equal(first.logprobs.token_logprobs[0], null);
  assert.ok(first.logprobs.tokens.length >= promptTokens + 1);
  assert.equal(text, prompt + plain.choices[0].text);
  // A token prompt echoes as its decoded text.
  const ids = await client.completions.create({
    model: MODEL, prompt: [377, 419], max_tokens: 2, temperature: 0,
    echo: true });
  const decoded = await (await fetch(`http://${addr.http}/detokenize`, {
    method: 'POST', headers: { Authorization: `Bearer ${KEY}` },
    body: JSON.stringify({ model: MODEL, tokens: [377, 419] }) })).json();
  assert.ok(ids.choices[0].text.startsWith(decoded.prompt), ids.choices[0].text);
  // The prompt alone (max_tokens 0) is refused by name.
  await assert.rejects(
    client.completions.create({ model: MODEL, prompt, echo: true,
                                max_tokens: 0, logprobs: 1 }),
    (e) => e.status === 400 && e.param === 'max_tokens');
  await assertNothingHeld();
});

test('prompt_logprobs: vLLM\'s list, in the choice and at the chat top', async () => {
  // Completions: in each choice; one element per prompt token, null first.
  const c = await client.completions.create({
    model: MODEL, prompt: 'Copyright holders', max_tokens: 2, temperature: 0,
    prompt_logprobs: 1 });
  const ids = (await (await fetch(`http://${addr.http}/tokenize`, {
    method: 'POST', headers: { Authorization: `Bearer ${KEY}` },
    body: JSON.stringify({ model: MODEL, prompt: 'Copyright holders' }) }))
    .json()).tokens;
  const checkList = (plp, tokens, top) => {
    assert.ok(Array.isArray(plp), JSON.stringify(plp));
    assert.equal(plp.length, tokens.length);
    assert.equal(plp[0], null);
    for (let i = 1; i < plp.length; ++i) {
      // The prompt token itself, then up to `top` most likely tokens.
      assert.ok(String(tokens[i]) in plp[i], JSON.stringify(plp[i]));
      const entries = Object.values(plp[i]);
      assert.ok(entries.length >= 1 && entries.length <= top + 1);
      for (const e of entries) {
        assertLogprob(e.logprob, `prompt_logprobs[${i}]`);
        assert.equal(typeof e.decoded_token, 'string');
        assert.ok(e.rank === null || (Number.isInteger(e.rank) && e.rank >= 1),
                  JSON.stringify(e));
      }
    }
  };
  checkList(c.choices[0].prompt_logprobs, ids, 1);
  assert.equal(c.usage.prompt_tokens, ids.length);
  // Chat: at the top level of the response, once for its samples.
  const messages = [{ role: 'user', content: 'Name a license.' }];
  const chat = await client.chat.completions.create({
    model: MODEL, max_tokens: 3, temperature: 0, n: 2, prompt_logprobs: 0,
    messages });
  const chatIds = (await (await fetch(`http://${addr.http}/tokenize`, {
    method: 'POST', headers: { Authorization: `Bearer ${KEY}` },
    body: JSON.stringify({ model: MODEL, messages }) })).json()).tokens;
  checkList(chat.prompt_logprobs, chatIds, 0);
  assert.equal(chat.choices[0].prompt_logprobs, undefined);
  // Refused: out of range, not an integer, streamed (as vLLM).
  for (const bad of [21, -1, '2', 1.5]) {
    await assert.rejects(
      client.chat.completions.create({ model: MODEL, messages, max_tokens: 1,
                                       prompt_logprobs: bad }),
      (e) => e.status === 400 && e.param === 'prompt_logprobs', String(bad));
  }
  await assert.rejects(
    client.completions.create({ model: MODEL, prompt: 'x', stream: true,
                                prompt_logprobs: 1 }),
    (e) => e.status === 400 && e.param === 'prompt_logprobs');
  await assertNothingHeld();
});

test('stop strings end the text before the stop', async () => {
  const probe = await client.completions.create({
    model: MODEL, prompt: 'The license grants you', max_tokens: 12,
    temperature: 0 });
  const text = probe.choices[0].text;
  // A stop string that occurs after the first characters of the output.
  const stop = text.trim().split(/\s+/)[1];
  assert.ok(stop, text);
  const r = await client.completions.create({
    model: MODEL, prompt: 'The license grants you', max_tokens: 12,
    temperature: 0, stop: [stop] });
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.equal(r.choices[0].text, text.slice(0, text.indexOf(stop)));
});

test('chat: a second turn reuses the first one\'s KV', async () => {
  const first = [{ role: 'system', content: 'You explain software licenses.' },
                 { role: 'user', content: 'What does the GPL require?' }];
  const a = await client.chat.completions.create({
    model: MODEL, messages: first, max_tokens: 16, temperature: 0 });
  assert.match(a.id, /^chatcmpl-/);
  assert.equal(a.object, 'chat.completion');
  assert.equal(a.choices[0].message.role, 'assistant');
  const answer = a.choices[0].message.content;
  const b = await client.chat.completions.create({
    model: MODEL, max_tokens: 4, temperature: 0,
    messages: [...first, { role: 'assistant', content: answer },
               { role: 'user', content: 'And the MIT license?' }] });
  // The whole first prompt is a prefix of the second.
  assert.ok(b.usage.prompt_tokens_details.cached_tokens >=
                a.usage.prompt_tokens - 1,
            JSON.stringify([a.usage, b.usage]));
});

test('chat stream: role first, content deltas, finish last', async () => {
  const stream = await client.chat.completions.create({
    model: MODEL, stream: true, max_tokens: 6, temperature: 0,
    messages: [{ role: 'user', content: 'Name a license.' }] });
  const deltas = [];
  let finish = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    deltas.push(chunk.choices[0].delta);
    if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
  }
  assert.equal(deltas[0].role, 'assistant');
  assert.ok(['length', 'stop'].includes(finish), finish);
});

test('an aborted stream leaves no lease and nothing in flight', async () => {
  const controller = new AbortController();
  const stream = await client.completions.create({
    model: MODEL, prompt: 'The license grants you', max_tokens: 1500,
    temperature: 0, ignore_eos: true, stream: true },
    { signal: controller.signal });
  let chunks = 0;
  // The SDK ends an aborted stream's iteration without an error.
  for await (const _ of stream) {
    if (++chunks === 3) controller.abort();
  }
  assert.ok(chunks < 100, `${chunks} chunks after the abort`);
  await assertNothingHeld();
  assert.ok(await metric(addr.routerMetrics, 'radixkv_router_requests_total',
                         ['api="openai"', 'outcome="client_cancelled"']) >= 1);
});

test('errors: status codes and OpenAI error objects', async () => {
  // 400 naming the parameter.
  await assert.rejects(
    client.completions.create({ model: MODEL, prompt: 'x', top_p: 5 }),
    (e) => e.status === 400 && e.param === 'top_p' &&
           e.type === 'invalid_request_error');
  await assert.rejects(
    client.chat.completions.create({
      model: MODEL, messages: [{ role: 'user', content: 'x' }],
      tools: [{ type: 'function', function: { name: 'f' } }] }),
    (e) => e.status === 400 && e.param === 'tools');
  await assert.rejects(
    client.completions.create({ model: MODEL, prompt: 'x', n: 65 }),
    (e) => e.status === 400 && e.param === 'n');
  // 404: a model nobody serves.
  await assert.rejects(
    client.completions.create({ model: 'no-such-model', prompt: 'x' }),
    (e) => e.status === 404 && e.code === 'model_not_found');
  // 429: a prompt + max_tokens that no worker's KV pool can hold.
  await assert.rejects(
    client.completions.create({ model: MODEL, prompt: 'license '.repeat(300),
                                max_tokens: 1200 }),
    (e) => e.status === 429);
  await assertNothingHeld();
});

test('keys: required, wrong ones refused, /health open', async () => {
  const wrong = new OpenAI({ apiKey: 'sk-wrong', baseURL: `http://${addr.http}/v1`,
                             maxRetries: 0 });
  await assert.rejects(wrong.models.list(),
                       (e) => e.status === 401 && e.code === 'invalid_api_key');
  const none = await fetch(`http://${addr.http}/v1/models`);
  assert.equal(none.status, 401);
  const body = await none.json();
  assert.equal(body.error.code, 'invalid_api_key');
  assert.ok(!JSON.stringify(body).includes(KEY));
  const health = await fetch(`http://${addr.http}/health`);
  assert.equal(health.status, 200);
  // The other key of the file works too.
  const other = new OpenAI({ apiKey: 'sk-other', baseURL: `http://${addr.http}/v1`,
                             maxRetries: 0 });
  assert.equal((await other.models.list()).data.length, 1);
});
