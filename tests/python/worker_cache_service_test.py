"""The worker binary (embedded radixkv-demo-llama model on the CPU backend)
against a real cache_service process on loopback, through a Python gRPC
client generated from proto/:

- two turns of one conversation: the second turn computes only its new
  tokens (GetStats deltas, usage.cached_tokens), and greedy outputs equal a
  run with the prefix cache disabled;
- a text prompt gives the same generation as its token ids, with text deltas;
- bad input is INVALID_ARGUMENT and takes no lease;
- a client that cancels mid-stream leaves no lease behind;
- a worker whose cache service is unreachable answers UNAVAILABLE;
- /metrics exposes the scheduler metrics;
- SIGTERM drains, deregisters from the cache service and exits 0.
"""

import os
import sys
import threading
import time
import unittest
import urllib.request

import grpc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import radixkv_stubs  # noqa: E402
from loopback_process import ServiceProcess, free_port  # noqa: E402

ROOT = os.environ.get("RADIXKV_REPO_ROOT", os.getcwd())
STUBS = radixkv_stubs.generate(os.path.join(ROOT, "proto"))
CS = STUBS.cache_service_pb2
COMMON = STUBS.common_pb2
WK = STUBS.worker_pb2
CACHE_SERVICE = os.path.join(ROOT, "cache_service/cache_service")
WORKER = os.path.join(ROOT, "worker/worker")
WORKER_ID = "worker-under-test"
PAGE_SIZE = 16

# Tokenization of PROMPT_TEXT by the model's tokenizer.model (BOS first),
# cross-checked by test_text_prompt_matches_token_ids.
PROMPT_TEXT = ("Permission is hereby granted, free of charge, to any person "
               "obtaining a copy of this software")
PROMPT_IDS = [
    1, 309, 366, 269, 372, 377, 269, 377, 387, 263, 378, 404, 405, 377, 406,
    382, 291, 379, 277, 402, 297, 271, 378, 288, 279, 387, 308, 406, 378, 402,
    322, 367, 405, 287, 263, 385, 262, 377, 381, 404, 379, 384, 268, 320, 266,
    279, 316, 288, 349, 295, 358
]
# " and associated documentation files", without BOS: the user's next turn.
NEXT_TURN_IDS = [
    259, 384, 281, 266, 385, 385, 381, 386, 380, 294, 277, 305, 381, 386, 390,
    391, 328, 334, 297, 312, 283
]


def Process(args):
    """A binary as a subprocess (loopback_process.ServiceProcess)."""
    return ServiceProcess(args, STUBS)


def generate(stub, ids=None, text=None, max_new_tokens=16, ignore_eos=False,
             stop=(), **kwargs):
    """Runs one streamed Generate; returns (token ids, text, last response)."""
    request = COMMON.GenerateRequest(
        sampling=COMMON.SamplingParams(max_new_tokens=max_new_tokens,
                                       ignore_eos=ignore_eos, stop=stop),
        **kwargs)
    if ids is not None:
        request.token_ids.ids.extend(ids)
    if text is not None:
        request.text = text
    tokens, pieces, last = [], [], None
    for response in stub.Generate(request, timeout=120):
        tokens.extend(response.token_ids)
        pieces.append(response.text)
        last = response
    return tokens, "".join(pieces), last


def worker_epoch(stub):
    """The worker's registered epoch; 0 while starting or unregistered."""
    try:
        return stub.GetStats(WK.WorkerStatsRequest(), timeout=5).epoch
    except grpc.RpcError:
        return 0


def start_registered_worker(test, cache_port, worker_id, *flags):
    """Starts the worker binary against the cache service on cache_port
    (extra flags appended), killed at `test`'s cleanup, and waits until it has
    registered. Returns (process, Worker stub)."""
    port = free_port()
    worker = Process([
        WORKER, "--bind_address=127.0.0.1", "--grpc_port=%d" % port,
        "--metrics_port=0", "--cache_service=127.0.0.1:%d" % cache_port,
        "--worker_id=" + worker_id
    ] + list(flags))
    test.addCleanup(worker.kill)
    stub = STUBS.worker_pb2_grpc.WorkerStub(worker.wait_serving(port))
    deadline = time.time() + 30
    while not worker_epoch(stub):
        test.assertLess(time.time(), deadline, worker.output())
        time.sleep(0.05)
    return worker, stub


class WorkerWithCacheServiceTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.cache_port = free_port()
        cls.cache = Process([
            CACHE_SERVICE, "--bind_address=127.0.0.1",
            "--grpc_port=%d" % cls.cache_port, "--metrics_port=0"
        ])
        cache_channel = cls.cache.wait_serving(cls.cache_port)
        cls.cache_stub = STUBS.cache_service_pb2_grpc.CacheServiceStub(
            cache_channel)
        cls.port = free_port()
        cls.metrics_port = free_port()
        cls.worker = Process([
            WORKER, "--bind_address=127.0.0.1", "--grpc_port=%d" % cls.port,
            "--metrics_port=%d" % cls.metrics_port,
            "--cache_service=127.0.0.1:%d" % cls.cache_port,
            "--worker_id=" + WORKER_ID, "--page_size=%d" % PAGE_SIZE,
            "--kv_capacity_tokens=4096", "--max_prefill_tokens=32",
            "--threads=2", "--drain_timeout_s=20"
        ])
        channel = cls.worker.wait_serving(cls.port)
        cls.stub = STUBS.worker_pb2_grpc.WorkerStub(channel)
        # Registered once the cache service lists the worker.
        deadline = time.time() + 30
        while True:
            try:
                cls.cache_stub.Stats(CS.StatsRequest(worker_id=WORKER_ID),
                                     timeout=1)
                break
            except grpc.RpcError:
                if time.time() > deadline:
                    raise AssertionError("worker never registered:\n" +
                                         cls.worker.output())
                time.sleep(0.05)

    @classmethod
    def tearDownClass(cls):
        cls.worker.kill()
        cls.cache.kill()

    def stats(self):
        return self.stub.GetStats(WK.WorkerStatsRequest(), timeout=10)

    def cache_worker_stats(self):
        reply = self.cache_stub.Stats(CS.StatsRequest(worker_id=WORKER_ID),
                                      timeout=10)
        self.assertEqual(len(reply.workers), 1)
        return reply.workers[0]

    def wait_no_leases(self, timeout_s=10.0):
        deadline = time.time() + timeout_s
        while True:
            leases = self.cache_worker_stats().active_leases
            if leases == 0 or time.time() > deadline:
                return leases
            time.sleep(0.05)

    def test_1_two_turns_second_computes_only_new_tokens(self):
        self.cache_stub.Flush(CS.FlushRequest(worker_id=WORKER_ID), timeout=10)
        before = self.stats()
        turn1, text1, last1 = generate(self.stub, ids=PROMPT_IDS,
                                       max_new_tokens=24, return_text=True)
        self.assertTrue(last1.finished)
        self.assertEqual(last1.worker_id, WORKER_ID)
        self.assertEqual(last1.usage.prompt_tokens, len(PROMPT_IDS))
        self.assertEqual(last1.usage.cached_tokens, 0)
        self.assertEqual(last1.usage.completion_tokens, len(turn1))
        self.assertGreater(len(turn1), 0)
        self.assertTrue(text1)
        after1 = self.stats()
        self.assertEqual(
            after1.prefill_tokens_computed - before.prefill_tokens_computed,
            len(PROMPT_IDS))

        # Turn 2: the whole conversation so far plus the user's new tokens.
        # Turn 1 committed its prompt and every generated token except the
        # last (whose KV was never computed), all reusable token-granularly.
        prompt2 = PROMPT_IDS + turn1 + NEXT_TURN_IDS
        committed = len(PROMPT_IDS) + len(turn1) - 1
        # The worker commits before it streams the last token: what a router
        # sees right after turn 1 already includes it.
        match = self.cache_stub.Match(
            CS.MatchRequest(model="radixkv-demo-llama", tokens=prompt2),
            timeout=10)
        matched = {w.worker_id: w.matched_tokens for w in match.workers}
        self.assertEqual(matched[WORKER_ID], committed)
        turn2, _, last2 = generate(self.stub, ids=prompt2, max_new_tokens=16)
        after2 = self.stats()
        self.assertEqual(last2.usage.cached_tokens, committed)
        self.assertEqual(
            after2.prefill_tokens_computed - after1.prefill_tokens_computed,
            len(prompt2) - committed)
        self.assertEqual(len(prompt2) - committed, len(NEXT_TURN_IDS) + 1)
        self.assertEqual(
            after2.prefill_tokens_reused - after1.prefill_tokens_reused,
            committed)

        # The same two prompts without the prefix cache: identical greedy
        # outputs, everything computed.
        base1, base_text1, _ = generate(self.stub, ids=PROMPT_IDS,
                                        max_new_tokens=24, return_text=True,
                                        disable_prefix_cache=True)
        self.assertEqual(base1, turn1)
        self.assertEqual(base_text1, text1)
        base2, _, last_base2 = generate(self.stub, ids=prompt2,
                                        max_new_tokens=16,
                                        disable_prefix_cache=True)
        self.assertEqual(last_base2.usage.cached_tokens, 0)
        self.assertEqual(base2, turn2)
        after3 = self.stats()
        self.assertEqual(
            after3.prefill_tokens_computed - after2.prefill_tokens_computed,
            len(PROMPT_IDS) + len(prompt2))
        self.assertEqual(self.wait_no_leases(), 0)
        sys.stderr.write("turn 1: %r\nturn 2 cached %d of %d prompt tokens\n" %
                         (text1, last2.usage.cached_tokens, len(prompt2)))

    def test_2_text_prompt_matches_token_ids(self):
        by_text, text, last = generate(self.stub, text=PROMPT_TEXT,
                                       max_new_tokens=12, return_text=True,
                                       disable_prefix_cache=True)
        by_ids, text_ids, _ = generate(self.stub, ids=PROMPT_IDS,
                                       max_new_tokens=12, return_text=True,
                                       disable_prefix_cache=True)
        self.assertEqual(last.usage.prompt_tokens, len(PROMPT_IDS))
        self.assertEqual(by_text, by_ids)
        self.assertEqual(text, text_ids)
        self.assertTrue(text)
        self.assertEqual(last.finish_reason, COMMON.FINISH_REASON_LENGTH)
        # A stop string inside that text: generation ends there and the stop
        # string is cut from the returned text.
        words = text.split()
        self.assertGreaterEqual(len(words), 2, text)
        stop = words[1]
        stopped_ids, stopped_text, stopped = generate(
            self.stub, text=PROMPT_TEXT, max_new_tokens=12, return_text=True,
            stop=[stop], disable_prefix_cache=True)
        self.assertEqual(stopped.finish_reason, COMMON.FINISH_REASON_STOP)
        self.assertEqual(stopped_text, text[:text.index(stop)])
        self.assertEqual(stopped_ids, by_text[:len(stopped_ids)])
        self.assertLess(len(stopped_ids), len(by_text))

    def test_3_bad_input_is_invalid_argument_without_leases(self):
        self.assertEqual(self.wait_no_leases(), 0)  # Earlier tests' commits.
        acquires_before = self.cache_worker_stats().prefix_query_tokens
        cases = {
            "empty prompt": dict(ids=[]),
            "token id = vocab": dict(ids=[1, 512]),
            "unknown model": dict(ids=PROMPT_IDS, model="no-such-model"),
            "max_new_tokens 0": dict(ids=PROMPT_IDS, max_new_tokens=0),
            "max_new_tokens 65537": dict(ids=PROMPT_IDS, max_new_tokens=65537),
        }
        for name, kwargs in cases.items():
            with self.subTest(case=name):
                with self.assertRaises(grpc.RpcError) as err:
                    generate(self.stub, **kwargs)
                self.assertEqual(err.exception.code(),
                                 grpc.StatusCode.INVALID_ARGUMENT)
        request = COMMON.GenerateRequest(
            sampling=COMMON.SamplingParams(max_new_tokens=4, top_p=1.5))
        request.token_ids.ids.extend(PROMPT_IDS)
        with self.assertRaises(grpc.RpcError) as err:
            list(self.stub.Generate(request, timeout=30))
        self.assertEqual(err.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(self.wait_no_leases(), 0)
        self.assertEqual(self.cache_worker_stats().prefix_query_tokens,
                         acquires_before)

    def test_4_client_cancel_releases_lease(self):
        request = COMMON.GenerateRequest(
            request_id="cancel-me",
            sampling=COMMON.SamplingParams(max_new_tokens=1500,
                                           ignore_eos=True))
        request.token_ids.ids.extend(PROMPT_IDS)
        aborted_before = self.stats().requests_aborted
        call = self.stub.Generate(request, timeout=120)
        first = next(call)
        self.assertEqual(len(first.token_ids), 1)
        self.assertEqual(self.cache_worker_stats().active_leases, 1)
        call.cancel()
        self.assertEqual(self.wait_no_leases(), 0)
        deadline = time.time() + 10
        while (self.stats().requests_aborted == aborted_before and
               time.time() < deadline):
            time.sleep(0.05)
        self.assertEqual(self.stats().requests_aborted, aborted_before + 1)
        while self.stats().load.running_requests and time.time() < deadline:
            time.sleep(0.05)
        self.assertEqual(self.stats().load.running_requests, 0)

    def scrape_metrics(self):
        body = urllib.request.urlopen(
            "http://127.0.0.1:%d/metrics" % self.metrics_port,
            timeout=10).read().decode()
        values = {}
        for line in body.splitlines():
            if line and not line.startswith("#") and "{" not in line:
                name, value = line.rsplit(" ", 1)
                values[name] = float(value)
        return values

    def test_5_metrics_exposed(self):
        generate(self.stub, ids=PROMPT_IDS, max_new_tokens=4)
        # Gauges are published at the end of the scheduler step that
        # streamed the last token.
        deadline = time.time() + 10
        values = self.scrape_metrics()
        while (values["radixkv_worker_running_requests"] != 0 and
               time.time() < deadline):
            time.sleep(0.05)
            values = self.scrape_metrics()
        self.assertEqual(values["radixkv_worker_running_requests"], 0)
        self.assertGreater(
            values["radixkv_worker_time_to_first_token_seconds_count"], 0)
        self.assertGreater(values["radixkv_worker_decode_tokens_total"], 0)
        self.assertGreater(values["radixkv_worker_step_seconds_count"], 0)
        self.assertGreater(
            values["radixkv_worker_prefill_tokens_reused_total"], 0)
        self.assertIn("radixkv_worker_preemptions_total", values)

    def test_6_unreachable_cache_service_is_unavailable(self):
        port = free_port()
        dead = free_port()
        other = Process([
            WORKER, "--bind_address=127.0.0.1", "--grpc_port=%d" % port,
            "--metrics_port=0", "--cache_service=127.0.0.1:%d" % dead,
            "--worker_id=orphan", "--cache_rpc_timeout_ms=500"
        ])
        try:
            channel = other.wait_serving(port)
            stub = STUBS.worker_pb2_grpc.WorkerStub(channel)
            with self.assertRaises(grpc.RpcError) as err:
                generate(stub, ids=PROMPT_IDS, max_new_tokens=4)
            self.assertEqual(err.exception.code(), grpc.StatusCode.UNAVAILABLE)
            code, out = other.stop()
            self.assertEqual(code, 0, out)
            self.assertIn("stopped cleanly", out)
        finally:
            other.kill()

    def test_7_sigterm_drains_and_deregisters(self):
        code, out = self.worker.stop()
        self.assertEqual(code, 0, out)
        self.assertIn("stopped cleanly", out)
        self.assertIn("deregistered", out)
        with self.assertRaises(grpc.RpcError) as err:
            self.cache_stub.Stats(CS.StatsRequest(worker_id=WORKER_ID),
                                  timeout=10)
        self.assertEqual(err.exception.code(), grpc.StatusCode.NOT_FOUND)


class SmallPoolTest(unittest.TestCase):
    """A pool too small for the offered load: leases grow page by page
    through the real cache service, sequences are preempted and recomputed,
    and every output still equals the same request run alone."""

    def test_concurrent_requests_grow_and_preempt(self):
        cache_port = free_port()
        cache = Process([
            CACHE_SERVICE, "--bind_address=127.0.0.1",
            "--grpc_port=%d" % cache_port, "--metrics_port=0"
        ])
        self.addCleanup(cache.kill)
        cache.wait_serving(cache_port)
        worker, stub = start_registered_worker(self, cache_port, "small-pool",
                                               "--page_size=16",
                                               "--kv_capacity_tokens=320",
                                               "--grow_tokens=16", "--threads=2")

        prompts = [PROMPT_IDS[:20 + 7 * i] for i in range(4)]
        alone = [
            generate(stub, ids=p, max_new_tokens=80, ignore_eos=True,
                     disable_prefix_cache=True)[0] for p in prompts
        ]
        for tokens in alone:
            self.assertEqual(len(tokens), 80)

        results = [None] * len(prompts)

        def run(i):
            results[i] = generate(stub, ids=prompts[i], max_new_tokens=80,
                                  ignore_eos=True,
                                  disable_prefix_cache=True)[0]

        threads = [threading.Thread(target=run, args=(i,))
                   for i in range(len(prompts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        stats = stub.GetStats(WK.WorkerStatsRequest(), timeout=5)
        # 4 x (>= 20 + 79) slots cannot fit 320: someone was preempted.
        self.assertGreater(stats.preemptions, 0)
        for i in range(len(prompts)):
            self.assertEqual(results[i], alone[i], "request %d" % i)
        code, out = worker.stop()
        self.assertEqual(code, 0, out)


class CacheServiceRestartTest(unittest.TestCase):
    """The cache service restarts without a journal: the worker's heartbeat
    gets NOT_FOUND, it re-registers under a fresh epoch and serves again."""

    def test_worker_reregisters_after_cache_service_restart(self):
        cache_port = free_port()
        args = [
            CACHE_SERVICE, "--bind_address=127.0.0.1",
            "--grpc_port=%d" % cache_port, "--metrics_port=0",
            "--heartbeat_timeout_ms=900"
        ]
        cache = Process(args)
        self.addCleanup(lambda: cache.kill())
        cache.wait_serving(cache_port)
        worker, stub = start_registered_worker(self, cache_port, "restart",
                                               "--threads=2")
        first_epoch = stub.GetStats(WK.WorkerStatsRequest(), timeout=5).epoch
        before, _, _ = generate(stub, ids=PROMPT_IDS, max_new_tokens=8)

        cache.kill()
        cache = Process(args)
        channel = cache.wait_serving(cache_port)
        cache_stub = STUBS.cache_service_pb2_grpc.CacheServiceStub(channel)
        deadline = time.time() + 30
        while True:
            try:
                reply = cache_stub.Stats(CS.StatsRequest(worker_id="restart"),
                                         timeout=1)
                break
            except grpc.RpcError:
                self.assertLess(time.time(), deadline, worker.output())
                time.sleep(0.05)
        self.assertGreater(reply.workers[0].epoch, first_epoch)
        after, _, last = generate(stub, ids=PROMPT_IDS, max_new_tokens=8)
        self.assertEqual(after, before)
        self.assertEqual(last.usage.cached_tokens, 0)  # The tree was lost.
        self.assertEqual(
            stub.GetStats(WK.WorkerStatsRequest(), timeout=5).epoch,
            reply.workers[0].epoch)
        code, out = worker.stop()
        self.assertEqual(code, 0, out)


if __name__ == "__main__":
    unittest.main(verbosity=2)
