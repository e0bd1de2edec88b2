"""Adversarial inputs against a live loopback cluster of the real binaries
(cache_service in memory mode, two CPU workers with the embedded model, the
router), through Python clients generated from proto/:

- every CacheService RPC with out-of-range, unknown, stale and duplicate
  inputs answers its documented status code and changes nothing
  (free + evictable + protected == capacity, no lease left);
- Worker.Generate and Router.Generate reject bad prompts and sampling values
  with INVALID_ARGUMENT before any memory is taken;
- duplicate request_ids, unknown/concurrent aborts, client cancellation and
  deadlines mid-stream leave no lease behind;
- an abandoned lease expires after its TTL;
- random bytes, HTTP/1 and unparseable messages on every port do not take a
  process down; unknown methods are UNIMPLEMENTED;
- a stalled redis-server (SIGSTOP) makes the journaling cache service answer
  UNAVAILABLE promptly; after SIGCONT it rebuilds from Redis and serves;
- kill -9 of a worker mid-stream gives UNAVAILABLE naming the worker (or a
  retry elsewhere), and the dead worker is dropped with nothing held;
- SIGTERM stops every process with exit code 0.

Bugs found while writing this test that are NOT asserted here (it only
asserts behaviour that is correct today) are listed in the adversarial
report to the owners.
"""

import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import grpc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import radixkv_stubs  # noqa: E402
from loopback_process import ServiceProcess, free_port  # noqa: E402

ROOT = os.environ.get("RADIXKV_REPO_ROOT", os.getcwd())
STUBS = radixkv_stubs.generate(os.path.join(ROOT, "proto"))
CS = STUBS.cache_service_pb2
COMMON = STUBS.common_pb2
WK = STUBS.worker_pb2
RT = STUBS.router_pb2
CACHE_SERVICE = os.path.join(ROOT, "cache_service/cache_service")
WORKER = os.path.join(ROOT, "worker/worker")
ROUTER = os.path.join(ROOT, "router/router")
MODEL = "radixkv-demo-llama"
VOCAB = 512
CONTEXT = 2048
CAPACITY = 4096
LEASE_TTL_MS = 3000
HEARTBEAT_TIMEOUT_MS = 3000
SEED = int(os.environ.get("RADIXKV_TEST_SEED", "0")) or random.randrange(1, 2**31)
INVALID = grpc.StatusCode.INVALID_ARGUMENT


# Large enough for the oversized-input cases.
CHANNEL_OPTIONS = [("grpc.max_send_message_length", 64 << 20),
                   ("grpc.max_receive_message_length", 64 << 20)]


def channel(port):
    return grpc.insecure_channel("127.0.0.1:%d" % port,
                                 options=CHANNEL_OPTIONS)


def Process(args):
    """A binary as a subprocess (loopback_process.ServiceProcess)."""
    return ServiceProcess(args, STUBS, log_prefix="radixkv_adv_",
                          channel_options=CHANNEL_OPTIONS,
                          output_tail_chars=4000)


def request(ids=None, text=None, max_new_tokens=4, request_id="", **sampling):
    r = COMMON.GenerateRequest(
        request_id=request_id,
        sampling=COMMON.SamplingParams(max_new_tokens=max_new_tokens,
                                       **sampling))
    if ids is not None:
        r.token_ids.ids.extend(ids)
    if text is not None:
        r.text = text
    return r


def stream(stub, req, timeout=60, metadata=None):
    """Runs a streamed Generate; returns (code, details, token ids, last)."""
    tokens, last = [], None
    try:
        for response in stub.Generate(req, timeout=timeout,
                                      metadata=metadata):
            tokens.extend(response.token_ids)
            last = response
        return grpc.StatusCode.OK, "", tokens, last
    except grpc.RpcError as e:
        return e.code(), e.details(), tokens, last


def unary_code(fn, req, timeout=20):
    try:
        fn(req, timeout=timeout)
        return grpc.StatusCode.OK, ""
    except grpc.RpcError as e:
        return e.code(), e.details()


class AdversarialInputTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        sys.stderr.write("adversarial_input_test seed %d\n" % SEED)
        cls.rng = random.Random(SEED)
        cls.procs = []
        cls.cache_port = free_port()
        cls.cache = cls.start([
            CACHE_SERVICE, "--bind_address=127.0.0.1",
            "--grpc_port=%d" % cls.cache_port, "--metrics_port=0",
            "--lease_ttl_ms=%d" % LEASE_TTL_MS,
            "--heartbeat_timeout_ms=%d" % HEARTBEAT_TIMEOUT_MS,
            "--sweep_interval_ms=50"
        ])
        cls.cs = STUBS.cache_service_pb2_grpc.CacheServiceStub(
            cls.cache.wait_serving(cls.cache_port))
        cls.worker_ports = {}
        cls.workers = {}
        for wid in ("adv-w1", "adv-w2"):
            cls.start_worker(wid)
        cls.router_port = free_port()
        cls.router = cls.start([
            ROUTER, "--bind_address=127.0.0.1",
            "--grpc_port=%d" % cls.router_port, "--metrics_port=0",
            "--cache_service=127.0.0.1:%d" % cls.cache_port
        ])
        cls.rt = STUBS.router_pb2_grpc.RouterStub(
            cls.router.wait_serving(cls.router_port))
        cls.w1 = STUBS.worker_pb2_grpc.WorkerStub(channel(
            cls.worker_ports["adv-w1"]))
        cls.wait_registered(["adv-w1", "adv-w2"])

    @classmethod
    def start(cls, args):
        p = Process(args)
        cls.procs.append(p)
        return p

    @classmethod
    def start_worker(cls, wid):
        port = free_port()
        cls.worker_ports[wid] = port
        cls.workers[wid] = cls.start([
            WORKER, "--bind_address=127.0.0.1", "--grpc_port=%d" % port,
            "--metrics_port=0", "--cache_service=127.0.0.1:%d" % cls.cache_port,
            "--worker_id=" + wid, "--kv_capacity_tokens=%d" % CAPACITY,
            "--threads=1", "--drain_timeout_s=5"
        ])
        cls.workers[wid].wait_serving(port)

    @classmethod
    def wait_registered(cls, ids, timeout_s=30):
        deadline = time.time() + timeout_s
        while True:
            got = {w.worker_id for w in cls.cs.Stats(CS.StatsRequest(),
                                                     timeout=5).workers}
            if set(ids) <= got:
                return
            if time.time() > deadline:
                raise AssertionError("workers %s not registered (have %s)" %
                                     (ids, got))
            time.sleep(0.05)

    @classmethod
    def tearDownClass(cls):
        for p in cls.procs:
            p.kill()

    # ---- helpers ----

    def assert_accounting(self, timeout_s=10.0):
        """Every worker: free + evictable + protected == capacity, and no
        lease left (after the TTL at most)."""
        deadline = time.time() + timeout_s
        while True:
            reply = self.cs.Stats(CS.StatsRequest(), timeout=5)
            for w in reply.workers:
                self.assertEqual(
                    w.free_slots + w.evictable_slots + w.protected_slots,
                    w.capacity_slots, str(w))
                self.assertGreaterEqual(w.free_slots, 0)
                self.assertGreaterEqual(w.evictable_slots, 0)
                self.assertGreaterEqual(w.protected_slots, 0)
            if reply.active_leases == 0 and all(
                    w.protected_slots == 0 for w in reply.workers):
                return reply
            if time.time() > deadline:
                self.fail("leases still held: %s" % reply)
            time.sleep(0.05)

    def register_fake(self, wid, epoch=5, capacity=256, vocab=100):
        self.cs.Register(CS.RegisterRequest(
            worker_id=wid, address="127.0.0.1:1", capacity_slots=capacity,
            page_size=16, model="adv-model", epoch=epoch, vocab_size=vocab),
                         timeout=5)

    def fake_stats(self, wid):
        return self.cs.Stats(CS.StatsRequest(worker_id=wid),
                             timeout=5).workers[0]

    # ---- CacheService ----

    def test_cache_service_register_heartbeat_bad_input(self):
        wid = "adv-fake-reg"
        self.register_fake(wid)
        base = dict(worker_id="adv-fake-reg2", address="127.0.0.1:2",
                    capacity_slots=256, page_size=16, model="adv-model",
                    epoch=1, vocab_size=100)
        bad = [
            dict(worker_id=""), dict(worker_id="x" * 129), dict(model=""),
            dict(capacity_slots=0), dict(capacity_slots=-16),
            dict(capacity_slots=17), dict(capacity_slots=2**62),
            dict(page_size=0), dict(page_size=3), dict(page_size=-16),
            dict(page_size=256), dict(vocab_size=-1), dict(epoch=-1)
        ]
        for change in bad:
            args = dict(base)
            args.update(change)
            code, details = unary_code(self.cs.Register,
                                       CS.RegisterRequest(**args))
            self.assertEqual(code, INVALID, "%s: %s" % (change, details))
            self.assertTrue(details)
        # Lower epoch, same epoch with another shape.
        code, _ = unary_code(self.cs.Register, CS.RegisterRequest(
            worker_id=wid, address="127.0.0.1:1", capacity_slots=256,
            page_size=16, model="adv-model", epoch=4, vocab_size=100))
        self.assertEqual(code, grpc.StatusCode.FAILED_PRECONDITION)
        code, _ = unary_code(self.cs.Register, CS.RegisterRequest(
            worker_id=wid, address="127.0.0.1:1", capacity_slots=512,
            page_size=16, model="adv-model", epoch=5, vocab_size=100))
        self.assertEqual(code, grpc.StatusCode.FAILED_PRECONDITION)
        # Same epoch, same shape: idempotent.
        self.register_fake(wid)
        self.assertEqual(self.fake_stats(wid).capacity_slots, 256)
        # Heartbeat / Deregister: unknown worker, stale epoch.
        self.assertEqual(unary_code(self.cs.Heartbeat, CS.HeartbeatRequest(
            worker_id="adv-nope", epoch=1))[0], grpc.StatusCode.NOT_FOUND)
        self.assertEqual(unary_code(self.cs.Heartbeat, CS.HeartbeatRequest(
            worker_id=wid, epoch=4))[0], grpc.StatusCode.FAILED_PRECONDITION)
        self.assertEqual(unary_code(self.cs.Deregister, CS.DeregisterRequest(
            worker_id="adv-nope", epoch=1))[0], grpc.StatusCode.NOT_FOUND)
        self.assertEqual(unary_code(self.cs.Deregister, CS.DeregisterRequest(
            worker_id=wid, epoch=4))[0], grpc.StatusCode.FAILED_PRECONDITION)
        self.cs.Deregister(CS.DeregisterRequest(worker_id=wid, epoch=5),
                           timeout=5)
        self.assertEqual(unary_code(self.cs.Stats, CS.StatsRequest(
            worker_id=wid))[0], grpc.StatusCode.NOT_FOUND)

    def test_cache_service_lease_rpcs_bad_input(self):
        wid = "adv-fake-lease"
        self.register_fake(wid)
        before = self.fake_stats(wid)
        tokens = [self.rng.randrange(100) for _ in range(20)]

        def acquire(**kw):
            args = dict(worker_id=wid, epoch=5, model="adv-model",
                        tokens=tokens)
            args.update(kw)
            return unary_code(self.cs.Acquire, CS.AcquireRequest(**args))

        self.assertEqual(acquire(tokens=[])[0], INVALID)
        self.assertEqual(acquire(tokens=[1, -1])[0], INVALID)
        self.assertEqual(acquire(tokens=[1, 100])[0], INVALID)
        self.assertEqual(acquire(tokens=[1, 2**31 - 1])[0], INVALID)
        self.assertEqual(acquire(reserve_tokens=-1)[0], INVALID)
        self.assertEqual(acquire(reserve_tokens=65537)[0], INVALID)
        self.assertEqual(acquire(cache_salt="s" * 257)[0], INVALID)
        self.assertEqual(acquire(worker_id="adv-nope")[0],
                         grpc.StatusCode.NOT_FOUND)
        self.assertEqual(acquire(epoch=4)[0],
                         grpc.StatusCode.FAILED_PRECONDITION)
        self.assertEqual(acquire(epoch=6)[0],
                         grpc.StatusCode.FAILED_PRECONDITION)
        self.assertEqual(acquire(model="other")[0],
                         grpc.StatusCode.FAILED_PRECONDITION)
        # Larger than the pool: RESOURCE_EXHAUSTED and no change.
        self.assertEqual(acquire(tokens=[1] * 257)[0],
                         grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertEqual(acquire(reserve_tokens=300)[0],
                         grpc.StatusCode.RESOURCE_EXHAUSTED)
        mid = self.fake_stats(wid)
        self.assertEqual((mid.free_slots, mid.protected_slots,
                          mid.active_leases),
                         (before.free_slots, 0, 0))
        # Match: empty, out of vocab, over --max_prompt_tokens.
        for bad_tokens in ([], [1, -1], [1, 100]):
            self.assertEqual(unary_code(self.cs.Match, CS.MatchRequest(
                model="adv-model", tokens=bad_tokens))[0], INVALID)
        self.assertEqual(unary_code(self.cs.Match, CS.MatchRequest(
            model=MODEL, tokens=[1] * (1048576 + 1)), timeout=60)[0], INVALID)

        lease = self.cs.Acquire(CS.AcquireRequest(
            worker_id=wid, epoch=5, model="adv-model", tokens=tokens,
            reserve_tokens=4), timeout=5)
        lid = lease.lease_id
        self.assertEqual(len(lease.kv_indices), 24)
        for n in (0, -1, 65537):
            self.assertEqual(unary_code(self.cs.Grow, CS.GrowRequest(
                lease_id=lid, num_tokens=n))[0], INVALID, n)
        self.assertEqual(unary_code(self.cs.Grow, CS.GrowRequest(
            lease_id=lid, num_tokens=1000))[0],
                         grpc.StatusCode.RESOURCE_EXHAUSTED)
        for bad_lid in (0, 2**64 - 1, lid + 100000):
            self.assertEqual(unary_code(self.cs.Grow, CS.GrowRequest(
                lease_id=bad_lid, num_tokens=1))[0], grpc.StatusCode.NOT_FOUND)
            self.assertEqual(unary_code(self.cs.Fork, CS.ForkRequest(
                lease_id=bad_lid, num_children=1, num_tokens=1))[0],
                             grpc.StatusCode.NOT_FOUND)
            self.assertEqual(unary_code(self.cs.Commit, CS.CommitRequest(
                lease_id=bad_lid, tokens=tokens))[0],
                             grpc.StatusCode.NOT_FOUND)
            self.assertEqual(unary_code(self.cs.Release, CS.ReleaseRequest(
                lease_id=bad_lid))[0], grpc.StatusCode.NOT_FOUND)
        for children, n in ((0, 5), (65, 5), (1, 0), (1, -1), (1, 25)):
            self.assertEqual(unary_code(self.cs.Fork, CS.ForkRequest(
                lease_id=lid, num_children=children, num_tokens=n))[0],
                             INVALID, (children, n))
        # Commit: shorter than the prompt, diverging, longer than the lease,
        # a generated token outside the vocab.
        for bad_commit in (tokens[:10], [(tokens[0] + 1) % 100] + tokens[1:],
                           tokens + [5] * 10, tokens + [100], tokens + [-7]):
            self.assertEqual(unary_code(self.cs.Commit, CS.CommitRequest(
                lease_id=lid, tokens=bad_commit))[0], INVALID)
        held = self.fake_stats(wid)
        self.assertEqual(held.active_leases, 1)
        self.assertEqual(held.protected_slots, 32)
        # A good commit, then double Commit / Release: NOT_FOUND.
        done = self.cs.Commit(CS.CommitRequest(lease_id=lid,
                                               tokens=tokens + [7]),
                              timeout=5)
        self.assertEqual(done.inserted_tokens, 21)
        self.assertEqual(unary_code(self.cs.Commit, CS.CommitRequest(
            lease_id=lid, tokens=tokens + [7]))[0], grpc.StatusCode.NOT_FOUND)
        self.assertEqual(unary_code(self.cs.Release, CS.ReleaseRequest(
            lease_id=lid))[0], grpc.StatusCode.NOT_FOUND)
        again = self.cs.Acquire(CS.AcquireRequest(
            worker_id=wid, epoch=5, model="adv-model", tokens=tokens),
                                timeout=5)
        self.assertEqual(again.prefix_len, 19)
        self.cs.Release(CS.ReleaseRequest(lease_id=again.lease_id), timeout=5)
        self.assertEqual(unary_code(self.cs.Release, CS.ReleaseRequest(
            lease_id=again.lease_id))[0], grpc.StatusCode.NOT_FOUND)
        # Evict / Flush / Stats.
        self.assertEqual(unary_code(self.cs.Evict, CS.EvictRequest(
            worker_id="adv-nope", num_tokens=1))[0], grpc.StatusCode.NOT_FOUND)
        for n in (0, -1, 2**62):
            self.assertEqual(unary_code(self.cs.Evict, CS.EvictRequest(
                worker_id=wid, num_tokens=n))[0], INVALID, n)
        self.assertEqual(unary_code(self.cs.Flush, CS.FlushRequest(
            worker_id="adv-nope"))[0], grpc.StatusCode.NOT_FOUND)
        after = self.fake_stats(wid)
        self.assertEqual(after.active_leases, 0)
        self.assertEqual(after.protected_slots, 0)
        self.assertEqual(after.cached_tokens, 21)
        self.assertEqual(after.free_slots + after.evictable_slots, 256)
        self.cs.Deregister(CS.DeregisterRequest(worker_id=wid, epoch=5),
                           timeout=5)

    def test_cache_service_abandoned_leases_expire(self):
        wid = "adv-fake-ttl"
        self.register_fake(wid)
        lease = self.cs.Acquire(CS.AcquireRequest(
            worker_id=wid, epoch=5, model="adv-model", tokens=[1, 2, 3]),
                                timeout=5)
        self.cs.Fork(CS.ForkRequest(lease_id=lease.lease_id, num_children=64,
                                    num_tokens=3), timeout=5)
        self.assertEqual(self.fake_stats(wid).active_leases, 65)
        # Keep the worker alive but not the leases: they expire after the TTL.
        deadline = time.time() + 10
        while True:
            self.cs.Heartbeat(CS.HeartbeatRequest(worker_id=wid, epoch=5),
                              timeout=5)
            s = self.fake_stats(wid)
            if s.active_leases == 0 or time.time() > deadline:
                break
            time.sleep(0.1)
        self.assertEqual(s.active_leases, 0)
        self.assertEqual(s.protected_slots, 0)
        self.assertEqual(s.free_slots + s.evictable_slots, 256)
        self.assertEqual(s.expired_leases, 65)
        self.assertEqual(unary_code(self.cs.Grow, CS.GrowRequest(
            lease_id=lease.lease_id, num_tokens=1))[0],
                         grpc.StatusCode.NOT_FOUND)
        self.cs.Deregister(CS.DeregisterRequest(worker_id=wid, epoch=5),
                           timeout=5)

    # ---- Worker / Router Generate ----

    def test_generate_rejects_bad_requests_before_taking_memory(self):
        w_before = self.w1.GetStats(WK.WorkerStatsRequest(), timeout=5)
        ok = [1, 5, 6]
        bad = {
            "no prompt": COMMON.GenerateRequest(
                sampling=COMMON.SamplingParams(max_new_tokens=4)),
            "empty ids": request([]),
            "empty text": request(text=""),
            "id == vocab": request([1, VOCAB]),
            "id -1": request([1, -1]),
            "id int32 max": request([1, 2**31 - 1]),
            "max_new 0": request(ok, max_new_tokens=0),
            "max_new -1": request(ok, max_new_tokens=-1),
            "max_new 65537": request(ok, max_new_tokens=65537),
            "max_new int32 max": request(ok, max_new_tokens=2**31 - 1),
            "beyond context": request(ok, max_new_tokens=65536),
            "prompt fills context": request([1] * CONTEXT),
            "prompt 100k": request([1] * 100000),
            "temperature nan": request(ok, temperature=float("nan")),
            "temperature inf": request(ok, temperature=float("inf")),
            "temperature -1": request(ok, temperature=-1.0),
            "temperature 101": request(ok, temperature=101.0),
            "top_p nan": request(ok, temperature=1.0, top_p=float("nan")),
            "top_p -0.5": request(ok, temperature=1.0, top_p=-0.5),
            "top_p 1.5": request(ok, temperature=1.0, top_p=1.5),
            "top_k -1": request(ok, temperature=1.0, top_k=-1),
            "top_k vocab+1": request(ok, temperature=1.0, top_k=VOCAB + 1),
            "stop id -1": request(ok, stop_token_ids=[-1]),
            "stop id vocab": request(ok, stop_token_ids=[VOCAB]),
            "17 stop strings": request(ok, stop=["a"] * 17),
            "stop 257 bytes": request(ok, stop=["a" * 257]),
            "empty stop": request(ok, stop=[""]),
            "request_id chars": request(ok, request_id="a b/c"),
            "request_id 129": request(ok, request_id="a" * 129),
            # Not valid in gRPC metadata: the router forwarded it as such and
            # gRPC aborted the process.
            "request_id non-ascii": request(ok, request_id="\u00fc"),
            "request_id newline": request(ok, request_id="a\nb"),
        }
        extra = {
            "priority 1001": dict(priority=1001),
            "priority int32 min": dict(priority=-2**31),
            "cache_salt 257": dict(cache_salt="s" * 257),
        }
        for name, fields in extra.items():
            r = request(ok)
            for k, v in fields.items():
                setattr(r, k, v)
            bad[name] = r
        for target, stub in (("worker", self.w1), ("router", self.rt)):
            for name, req in bad.items():
                code, details, tokens, _ = stream(stub, req)
                self.assertEqual(code, INVALID, "%s %s: %s %s" %
                                 (target, name, code, details))
                self.assertTrue(details, name)
                self.assertEqual(tokens, [], name)
        # The worker rejects an unknown model itself.
        r = request(ok)
        r.model = "adv-no-such-model"
        self.assertEqual(stream(self.w1, r)[0], INVALID)
        w_after = self.w1.GetStats(WK.WorkerStatsRequest(), timeout=5)
        self.assertEqual(w_after.prompt_tokens, w_before.prompt_tokens)
        self.assertEqual(w_after.steps, w_before.steps)
        self.assert_accounting()
        # Edge values that are valid still work.
        for req in (request(ok, temperature=1e-30), request(
                ok, temperature=1.0, top_p=1e-30), request(
                    ok, temperature=100.0, top_k=VOCAB, seed=2**64 - 1)):
            code, details, tokens, last = stream(self.rt, req)
            self.assertEqual(code, grpc.StatusCode.OK, details)
            self.assertEqual(len(tokens), 4)
            self.assertTrue(last.finished)
            self.assertTrue(all(0 <= t < VOCAB for t in tokens))

    def test_duplicate_request_ids_and_aborts(self):
        for target, stub in (("router", self.rt), ("worker", self.w1)):
            rid = "adv-dup-%s-%d" % (target, self.rng.randrange(10**9))
            results = [None] * 4
            go = threading.Barrier(4)

            def run(i):
                go.wait()
                results[i] = stream(stub, request(
                    [1, 7, 8, 9], max_new_tokens=64, ignore_eos=True,
                    request_id=rid))

            threads = [threading.Thread(target=run, args=(i,))
                       for i in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            codes = sorted(r[0].name for r in results)
            # Exactly one runs; the others overlap it (64 tokens) and are
            # ALREADY_EXISTS.
            self.assertEqual(codes.count("OK"), 1, (target, codes))
            self.assertEqual(codes.count("ALREADY_EXISTS"), 3,
                             (target, codes, [r[1] for r in results]))
            self.assertEqual(
                len([r for r in results if r[0] == grpc.StatusCode.OK][0][2]),
                64)

        # Abort of an unknown id.
        self.assertEqual(unary_code(self.rt.Abort, COMMON.AbortRequest(
            request_id="adv-nope"))[0], grpc.StatusCode.NOT_FOUND)
        self.assertFalse(self.w1.Abort(COMMON.AbortRequest(
            request_id="adv-nope"), timeout=5).aborted)
        self.assertFalse(self.w1.Abort(COMMON.AbortRequest(
            request_id="x" * 10000), timeout=5).aborted)

        # Five concurrent aborts of one streaming request: the stream ends
        # CANCELLED; a later Abort finds nothing.
        for target, stub in (("router", self.rt), ("worker", self.w1)):
            rid = "adv-abort-%s-%d" % (target, self.rng.randrange(10**9))
            it = stub.Generate(request([1, 7, 8, 10], max_new_tokens=1000,
                                       ignore_eos=True, request_id=rid),
                               timeout=60)
            next(it)
            aborted = [None] * 5
            go = threading.Barrier(5)

            def abort(i):
                go.wait()
                try:
                    aborted[i] = stub.Abort(COMMON.AbortRequest(
                        request_id=rid), timeout=10).aborted
                except grpc.RpcError as e:
                    aborted[i] = e.code()

            threads = [threading.Thread(target=abort, args=(i,))
                       for i in range(5)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            # Exactly one wins; the others answer aborted=false (the router
            # may also have forgotten the id already: NOT_FOUND).
            not_found = False if target == "worker" else \
                grpc.StatusCode.NOT_FOUND
            self.assertEqual(aborted.count(True), 1, aborted)
            self.assertEqual(aborted.count(True) + aborted.count(False) +
                             aborted.count(grpc.StatusCode.NOT_FOUND), 5,
                             aborted)
            with self.assertRaises(grpc.RpcError) as cm:
                list(it)
            self.assertEqual(cm.exception.code(), grpc.StatusCode.CANCELLED)
            deadline = time.time() + 10
            while True:
                try:
                    later = stub.Abort(COMMON.AbortRequest(request_id=rid),
                                       timeout=5).aborted
                except grpc.RpcError as e:
                    later = e.code()
                if later != True or time.time() > deadline:  # noqa: E712
                    break
                time.sleep(0.05)
            self.assertEqual(later, not_found)
        self.assert_accounting()

    def deadline_mid_stream(self, stub, timeout_s=1.0):
        """Streams a long generation whose deadline passes mid-stream by
        construction, whatever the machine's speed: once the first chunk
        arrives, the worker serving it is frozen (SIGSTOP) until the
        deadline has passed, then resumed. Returns the stream's final code.
        The freeze (at most timeout_s) stays well under the heartbeat
        timeout."""
        it = stub.Generate(request([1, 11, 12, 14], max_new_tokens=1000,
                                   ignore_eos=True), timeout=timeout_s)
        try:
            first = next(it)
        except grpc.RpcError as e:  # the deadline passed before any token
            return e.code()
        worker = self.workers[first.worker_id or "adv-w1"].proc
        os.kill(worker.pid, signal.SIGSTOP)
        try:
            time.sleep(timeout_s)
            try:
                for _ in it:
                    pass
                return grpc.StatusCode.OK
            except grpc.RpcError as e:
                return e.code()
        finally:
            os.kill(worker.pid, signal.SIGCONT)

    def test_client_cancel_and_deadline_mid_stream_leak_nothing(self):
        for stub in (self.rt, self.w1):
            for k in range(3):
                it = stub.Generate(request([1, 11, 12, 13, k],
                                           max_new_tokens=1000,
                                           ignore_eos=True), timeout=60)
                next(it)
                it.cancel()
            self.assertEqual(self.deadline_mid_stream(stub),
                             grpc.StatusCode.DEADLINE_EXCEEDED)
        self.assert_accounting()
        # The workers return to idle.
        deadline = time.time() + 10
        while True:
            load = self.w1.GetStats(WK.WorkerStatsRequest(), timeout=5).load
            if (load.running_requests == 0 and load.waiting_requests == 0) or \
                    time.time() > deadline:
                break
            time.sleep(0.05)
        self.assertEqual((load.running_requests, load.waiting_requests), (0, 0))

    # ---- the wire ----

    def test_garbage_bytes_and_unparseable_messages(self):
        ports = [self.cache_port, self.router_port] + list(
            self.worker_ports.values())
        for port in ports:
            for k in range(12):
                s = socket.create_connection(("127.0.0.1", port), timeout=2)
                kind = k % 4
                if kind == 0:
                    s.sendall(bytes(self.rng.randrange(256)
                                    for _ in range(self.rng.randint(1, 4096))))
                elif kind == 1:
                    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                elif kind == 2:
                    s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes(
                        self.rng.randrange(256) for _ in range(512)))
                try:
                    s.settimeout(0.2)
                    s.recv(1024)
                except OSError:
                    pass
                s.close()
        # Unknown services/methods: UNIMPLEMENTED. Undecodable request
        # bodies: an error status (not OK), the process stays up.
        for port, method in ((self.cache_port, "/radixkv.v1.CacheService/Acquire"),
                             (self.router_port, "/radixkv.v1.Router/ListWorkers"),
                             (self.worker_ports["adv-w1"],
                              "/radixkv.v1.Worker/GetStats")):
            ch = channel(port)
            try:
                ch.unary_unary("/radixkv.v1.NoSuch/Method")(b"", timeout=5)
                self.fail("unknown method answered")
            except grpc.RpcError as e:
                self.assertEqual(e.code(), grpc.StatusCode.UNIMPLEMENTED)
            for _ in range(5):
                try:
                    ch.unary_unary(method)(b"\xff\xff\xff\xff\x0f", timeout=5)
                    self.fail("undecodable request accepted by " + method)
                except grpc.RpcError as e:
                    self.assertNotEqual(e.code(), grpc.StatusCode.OK)
        # The worker and the router parse their request bodies themselves:
        # INVALID_ARGUMENT naming the message and its size.
        garbage = b"\xff\xff\xff\xff\x0f"
        for port, service, unary in (
                (self.worker_ports["adv-w1"], "Worker",
                 (("GetStats", "WorkerStatsRequest"),
                  ("Abort", "AbortRequest"))),
                (self.router_port, "Router",
                 (("ListWorkers", "ListWorkersRequest"),
                  ("Abort", "AbortRequest")))):
            ch = channel(port)
            for method, message in unary:
                try:
                    ch.unary_unary("/radixkv.v1.%s/%s" % (service, method))(
                        garbage, timeout=5)
                    self.fail("undecodable request accepted by " + method)
                except grpc.RpcError as e:
                    self.assertEqual(e.code(),
                                     grpc.StatusCode.INVALID_ARGUMENT)
                    self.assertEqual(
                        e.details(),
                        message + ": unparseable message (5 bytes)")
            self.assert_generate_refuses_garbage(ch, service, garbage)
        for p in self.procs:
            self.assertTrue(p.alive(), p.output())
        code, details, tokens, last = stream(self.rt, request([1, 5, 6]))
        self.assertEqual(code, grpc.StatusCode.OK, details)
        self.assertTrue(last.finished)
        self.assert_accounting()

    def assert_generate_refuses_garbage(self, ch, service, garbage):
        try:
            for _ in ch.unary_stream("/radixkv.v1.%s/Generate" % service)(
                    garbage, timeout=5):
                self.fail("a response to an undecodable GenerateRequest")
            self.fail("undecodable GenerateRequest accepted")
        except grpc.RpcError as e:
            self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertEqual(e.details(),
                             "GenerateRequest: unparseable message (5 bytes)")

    # ---- Redis journal stalls ----

    def test_redis_stall_answers_unavailable_then_recovers(self):
        """A stopped (SIGSTOP) redis-server: mutations answer UNAVAILABLE
        within the journal's I/O timeout, the service stays up, and after
        SIGCONT it rebuilds from Redis and serves with exact accounting."""
        redis_dir = tempfile.mkdtemp(prefix="radixkv_adv_redis_")
        redis_port = free_port()
        redis = self.start([
            "/usr/bin/redis-server", "--bind", "127.0.0.1", "--port",
            str(redis_port), "--dir", redis_dir, "--save", "",
            "--appendonly", "no"
        ])
        deadline = time.time() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", redis_port),
                                         timeout=1).close()
                break
            except OSError:
                self.assertLess(time.time(), deadline, redis.output())
                time.sleep(0.05)
        port = free_port()
        service = self.start([
            CACHE_SERVICE, "--bind_address=127.0.0.1", "--grpc_port=%d" % port,
            "--metrics_port=0", "--redis=127.0.0.1:%d" % redis_port,
            "--redis_key_prefix=adv"
        ])
        cs = STUBS.cache_service_pb2_grpc.CacheServiceStub(
            service.wait_serving(port))
        self.assertEqual(cs.Stats(CS.StatsRequest(), timeout=5).persistence,
                         "redis")
        cs.Register(CS.RegisterRequest(
            worker_id="adv-redis", address="127.0.0.1:1", capacity_slots=256,
            page_size=16, model="adv-model", epoch=1, vocab_size=100),
                    timeout=5)
        held = cs.Acquire(CS.AcquireRequest(
            worker_id="adv-redis", epoch=1, tokens=[1, 2, 3]), timeout=5)
        redis.proc.send_signal(signal.SIGSTOP)
        try:
            t0 = time.time()
            code, details = unary_code(cs.Acquire, CS.AcquireRequest(
                worker_id="adv-redis", epoch=1, tokens=[1, 2, 4]), timeout=20)
            self.assertEqual(code, grpc.StatusCode.UNAVAILABLE, details)
            self.assertLess(time.time() - t0, 15)
            # While broken every RPC is UNAVAILABLE, promptly.
            for fn, req in ((cs.Release, CS.ReleaseRequest(
                    lease_id=held.lease_id)), (cs.Stats, CS.StatsRequest())):
                self.assertEqual(unary_code(fn, req, timeout=5)[0],
                                 grpc.StatusCode.UNAVAILABLE)
            self.assertTrue(service.alive(), service.output())
        finally:
            redis.proc.send_signal(signal.SIGCONT)
        deadline = time.time() + 20
        while True:
            code, _ = unary_code(cs.Stats, CS.StatsRequest(), timeout=5)
            if code == grpc.StatusCode.OK or time.time() > deadline:
                break
            time.sleep(0.1)
        self.assertEqual(code, grpc.StatusCode.OK, service.output())
        # The lease acknowledged before the stall survived the rebuild.
        cs.Release(CS.ReleaseRequest(lease_id=held.lease_id), timeout=5)
        w = cs.Stats(CS.StatsRequest(worker_id="adv-redis"),
                     timeout=5).workers[0]
        self.assertEqual(w.free_slots + w.evictable_slots + w.protected_slots,
                         256)
        service.proc.send_signal(signal.SIGTERM)
        self.assertEqual(service.proc.wait(timeout=30), 0, service.output())
        redis.kill()

    # ---- faults (run last: they change the cluster) ----

    def test_zz_kill9_worker_mid_stream(self):
        victim = "adv-w2"
        results = {}

        def run(i):
            results[i] = stream(self.rt, request(
                [1, 40 + i, 41, 42], max_new_tokens=600, ignore_eos=True,
                request_id="adv-k9-%d-%d" % (i, self.rng.randrange(10**9))),
                                metadata=(("radixkv-placement-policy",
                                           "round_robin"),))

        threads = [threading.Thread(target=run, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        # Kill once the victim has streamed something.
        deadline = time.time() + 30
        while True:
            load = self.cs.Stats(CS.StatsRequest(worker_id=victim),
                                 timeout=5).workers[0]
            if load.protected_slots > 0 or time.time() > deadline:
                break
            time.sleep(0.02)
        time.sleep(0.3)
        self.workers[victim].kill()
        for t in threads:
            t.join()
        for i, (code, details, tokens, last) in results.items():
            if code == grpc.StatusCode.OK:
                self.assertEqual(len(tokens), 600)
            else:
                self.assertEqual(code, grpc.StatusCode.UNAVAILABLE, details)
                self.assertIn(victim, details)
        self.assertTrue(any(r[0] == grpc.StatusCode.UNAVAILABLE
                            for r in results.values()),
                        "no request was on the killed worker: %s" %
                        {i: (r[0], r[1]) for i, r in results.items()})
        # New requests still succeed (retried elsewhere before the first
        # token if placed on the dead worker).
        for j in range(3):
            code, details, _, last = stream(self.rt, request([1, 90 + j, 91]))
            self.assertEqual(code, grpc.StatusCode.OK, details)
            self.assertEqual(last.worker_id, "adv-w1")
        # The dead worker is dropped after the heartbeat timeout; the live one
        # holds nothing.
        deadline = time.time() + 10
        while True:
            ids = [w.worker_id for w in self.cs.Stats(CS.StatsRequest(),
                                                       timeout=5).workers]
            if victim not in ids or time.time() > deadline:
                break
            time.sleep(0.1)
        self.assertNotIn(victim, ids)
        self.assert_accounting()

    def test_zzz_sigterm_exits_cleanly(self):
        # A stream in flight on the router while everything is stopped.
        it = self.rt.Generate(request([1, 50, 51], max_new_tokens=1000,
                                      ignore_eos=True), timeout=60)
        first = list(next(it).token_ids)
        order = [self.router, self.workers["adv-w1"], self.cache]
        for p in order:
            if not p.alive():
                continue
            worker_stream = None
            if p is self.workers["adv-w1"]:
                # Something to drain, and a second SIGTERM during the drain:
                # it must not land on an OpenBLAS thread of the worker and
                # kill it by signal 15 (streams cut, no Deregister).
                worker_stream = self.w1.Generate(request(
                    [1, 52, 53], max_new_tokens=400, ignore_eos=True),
                                                 timeout=60)
                worker_first = list(next(worker_stream).token_ids)
            t0 = time.time()
            p.proc.send_signal(signal.SIGTERM)
            if worker_stream is not None:
                time.sleep(0.05)
                p.proc.send_signal(signal.SIGTERM)
            try:
                rc = p.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.fail("no exit 30 s after SIGTERM: %s\n%s" %
                          (p.args[0], p.output()))
            self.assertEqual(rc, 0, p.output())
            self.assertIn("stopped cleanly", p.output())
            if worker_stream is not None:
                # Drained to the end (--drain_timeout_s=5).
                rest = [t for r in worker_stream for t in r.token_ids]
                self.assertEqual(len(worker_first + rest), 400)
            sys.stderr.write("%s exited %.2f s after SIGTERM\n" %
                             (os.path.basename(p.args[0]), time.time() - t0))
        # The stream ends (finished within the router's grace, or
        # UNAVAILABLE), it does not hang.
        try:
            tokens = first + [t for r in it for t in r.token_ids]
            self.assertEqual(len(tokens), 1000)
        except grpc.RpcError as e:
            self.assertEqual(e.code(), grpc.StatusCode.UNAVAILABLE, e.details())


if __name__ == "__main__":
    unittest.main(verbosity=2)
