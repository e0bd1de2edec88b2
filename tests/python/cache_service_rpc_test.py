"""The cache_service binary called from a Python gRPC client generated from
proto/ (Debian python3-grpcio): Register, Acquire, Commit, Match, Stats, a
bad-input error, the Prometheus /metrics exposition, the in-memory mode
notice, and (with a redis-server started by this test on its own port and
temp dir) state surviving a restart."""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

import grpc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import radixkv_stubs  # noqa: E402
from loopback_process import free_port  # noqa: E402

ROOT = os.environ.get("RADIXKV_REPO_ROOT", os.getcwd())
STUBS = radixkv_stubs.generate(os.path.join(ROOT, "proto"))
CS = STUBS.cache_service_pb2
BINARY = os.path.join(ROOT, "cache_service/cache_service")


class CacheService:
    """The binary as a subprocess with a stub on its port."""

    def __init__(self, extra_args=()):
        self.port = free_port()
        self.metrics_port = free_port()
        self.log = tempfile.NamedTemporaryFile(prefix="cache_service_",
                                               suffix=".log", delete=False)
        self.proc = subprocess.Popen(
            [BINARY, "--bind_address=127.0.0.1", "--grpc_port=%d" % self.port,
             "--metrics_port=%d" % self.metrics_port] + list(extra_args),
            stdout=self.log, stderr=subprocess.STDOUT)
        # Wait for the port first: a channel that meets a refused connection
        # sits in reconnect backoff for seconds.
        deadline = time.time() + 30
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    break
            if time.time() > deadline or self.proc.poll() is not None:
                raise AssertionError("cache_service did not listen:\n" +
                                     self.output())
            time.sleep(0.02)
        self.channel = grpc.insecure_channel("127.0.0.1:%d" % self.port)
        self.stub = STUBS.cache_service_pb2_grpc.CacheServiceStub(self.channel)
        while True:
            try:
                self.stub.Stats(CS.StatsRequest(), timeout=1)
                return
            except grpc.RpcError:
                if time.time() > deadline or self.proc.poll() is not None:
                    raise AssertionError("cache_service not ready:\n" +
                                         self.output())
                time.sleep(0.05)

    def output(self):
        with open(self.log.name) as f:
            return f.read()

    def stop(self):
        self.channel.close()
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)
        return self.proc.returncode

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def register(stub, worker="w0", capacity=256, page_size=16, epoch=1):
    return stub.Register(CS.RegisterRequest(
        worker_id=worker, address="127.0.0.1:1", capacity_slots=capacity,
        page_size=page_size, model="m", epoch=epoch, vocab_size=100))


class CacheServiceRpcTest(unittest.TestCase):

    def test_memory_mode_rpcs_and_metrics(self):
        svc = CacheService()
        self.addCleanup(svc.kill)
        reply = register(svc.stub)
        self.assertEqual(reply.epoch, 1)
        self.assertGreater(reply.lease_ttl_ms, 0)

        prompt = list(range(1, 41))
        first = svc.stub.Acquire(CS.AcquireRequest(
            worker_id="w0", epoch=1, model="m", tokens=prompt))
        self.assertEqual(first.prefix_len, 0)
        self.assertEqual(len(first.kv_indices), 40)
        self.assertEqual(len(set(first.kv_indices)), 40)
        commit = svc.stub.Commit(CS.CommitRequest(lease_id=first.lease_id,
                                                  tokens=prompt))
        self.assertEqual(commit.inserted_tokens, 40)

        # Second turn, page_size 16: all 40 tokens are reused (token
        # granular: the partly matched third page is copied), where
        # page-granular reuse would give 32.
        second = svc.stub.Acquire(CS.AcquireRequest(
            worker_id="w0", epoch=1, model="m", tokens=prompt + [41]))
        self.assertEqual(second.prefix_len, 40)
        self.assertEqual(second.page_aligned_prefix_len, 32)
        self.assertEqual(list(second.kv_indices[:32]),
                         list(first.kv_indices[:32]))
        self.assertEqual(len(second.copy_ops), 1)
        self.assertEqual(second.copy_ops[0].num_tokens, 8)

        match = svc.stub.Match(CS.MatchRequest(model="m", tokens=prompt))
        self.assertEqual([w.worker_id for w in match.workers], ["w0"])
        self.assertEqual(match.workers[0].matched_tokens, 40)
        self.assertEqual(match.workers[0].page_aligned_tokens, 32)

        with self.assertRaises(grpc.RpcError) as err:
            svc.stub.Acquire(CS.AcquireRequest(worker_id="w0", epoch=1,
                                               model="m", tokens=[1, 100]))
        self.assertEqual(err.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        with self.assertRaises(grpc.RpcError) as err:
            svc.stub.Release(CS.ReleaseRequest(lease_id=first.lease_id))
        self.assertEqual(err.exception.code(), grpc.StatusCode.NOT_FOUND)

        stats = svc.stub.Stats(CS.StatsRequest())
        self.assertEqual(stats.persistence, "memory")
        self.assertEqual(stats.active_leases, 1)
        w = stats.workers[0]
        self.assertEqual(w.capacity_slots, 256)
        self.assertEqual(w.free_slots + w.evictable_slots + w.protected_slots,
                         256)
        self.assertEqual(w.prefix_query_tokens, 81)
        self.assertEqual(w.prefix_hit_tokens, 40)

        # /metrics (prometheus-cpp), refreshed by the background sweep.
        url = "http://127.0.0.1:%d/metrics" % svc.metrics_port
        deadline = time.time() + 10
        text = ""
        while time.time() < deadline:
            text = urllib.request.urlopen(url, timeout=5).read().decode()
            if 'radixkv_cache_prefix_hit_tokens_total{worker="w0"} 40' in text:
                break
            time.sleep(0.1)
        self.assertIn('radixkv_cache_prefix_hit_tokens_total{worker="w0"} 40',
                      text)
        self.assertIn('radixkv_cache_active_leases{worker="w0"} 1', text)
        self.assertIn('radixkv_cache_rpc_latency_seconds_count{rpc="Acquire"} 3',
                      text)
        self.assertIn('radixkv_cache_persistence{mode="memory"} 1', text)

        self.assertEqual(svc.stop(), 0)
        out = svc.output()
        self.assertIn("persistence: memory", out)
        self.assertIn("stopped cleanly", out)

    def test_check_flags_validates_service_flags(self):
        ok = subprocess.run([BINARY, "--check_flags", "--redis=127.0.0.1:6379",
                             "--eviction_policy=reuse_lru",
                             "--eviction_reuse_bonus_ms=2000"],
                            capture_output=True, text=True, timeout=30)
        self.assertEqual(ok.returncode, 0, ok.stderr)
        self.assertIn("flags ok", ok.stdout)
        for flag, word in [("--redis=nohost", "redis"),
                           ("--redis=h:99999", "redis"),
                           ("--eviction_policy=fifo", "eviction_policy"),
                           ("--eviction_reuse_bonus_ms=-1",
                            "eviction_reuse_bonus_ms"),
                           ("--lease_ttl_ms=0", "lease_ttl_ms"),
                           ("--heartbeat_timeout_ms=-5", "heartbeat_timeout_ms"),
                           ("--snapshot_every_ops=0", "snapshot_every_ops"),
                           ("--max_prompt_tokens=2000000", "max_prompt_tokens"),
                           ("--redis_key_prefix=", "redis_key_prefix"),
                           ("--metrics_port=-1", "metrics_port")]:
            bad = subprocess.run([BINARY, "--check_flags", flag],
                                 capture_output=True, text=True, timeout=30)
            self.assertEqual(bad.returncode, 2, flag)
            self.assertIn(word, bad.stderr, flag)

    def _start_redis(self, appendonly):
        """A private redis-server (own port and dir, stopped at cleanup);
        returns the cache service's --redis flag for it."""
        redis_dir = tempfile.mkdtemp(prefix="radixkv_redis_")
        self.addCleanup(shutil.rmtree, redis_dir, True)
        redis_port = free_port()
        redis = subprocess.Popen(
            ["/usr/bin/redis-server", "--port", str(redis_port), "--bind",
             "127.0.0.1", "--dir", redis_dir, "--save", "", "--appendonly",
             "yes" if appendonly else "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.addCleanup(lambda: (redis.kill(), redis.wait()))
        return "--redis=127.0.0.1:%d" % redis_port

    def test_redis_mode_survives_a_restart(self):
        args = [self._start_redis(appendonly=True), "--snapshot_every_ops=3"]

        svc = CacheService(args)
        self.addCleanup(svc.kill)
        register(svc.stub, page_size=1, capacity=64)
        lease = svc.stub.Acquire(CS.AcquireRequest(
            worker_id="w0", epoch=1, model="m", tokens=[5, 6, 7, 8],
            reserve_tokens=2))
        dump = svc.stub.Dump(CS.DumpRequest()).canonical
        self.assertEqual(svc.stub.Stats(CS.StatsRequest()).persistence,
                         "redis")
        svc.kill()  # SIGKILL: no clean shutdown

        again = CacheService(args)
        self.addCleanup(again.kill)
        # The restarted service credits its downtime to heartbeat and lease
        # times (docs/architecture.md "Worker liveness"); the rest is equal.
        times = re.compile(r"(last_heartbeat_ms|expires_at_ms)=\d+")
        self.assertEqual(
            times.sub(r"\1=T", again.stub.Dump(CS.DumpRequest()).canonical),
            times.sub(r"\1=T", dump))
        stats = again.stub.Stats(CS.StatsRequest())
        self.assertEqual(stats.active_leases, 1)
        commit = again.stub.Commit(CS.CommitRequest(
            lease_id=lease.lease_id, tokens=[5, 6, 7, 8, 9]))
        self.assertEqual(commit.inserted_tokens, 5)
        self.assertEqual(again.stop(), 0)
        self.assertIn("persistence: redis", again.output())
        self.assertIn("recovered state from redis", again.output())

    def test_second_instance_on_a_taken_port_leaves_the_journal_alone(self):
        # Opening the Redis journal fences the cache service that owns it,
        # so a second instance started by mistake on the same port must
        # fail to bind before it opens the journal.
        args = [self._start_redis(appendonly=False)]
        first = CacheService(args)
        self.addCleanup(first.kill)
        second = subprocess.run(
            [BINARY, "--bind_address=127.0.0.1",
             "--grpc_port=%d" % first.port, "--metrics_port=0"] + args,
            capture_output=True, text=True, timeout=60)
        self.assertEqual(second.returncode, 1, second.stdout + second.stderr)
        self.assertIn("is in use", second.stdout + second.stderr)
        self.assertNotIn("recovered state from redis",
                         second.stdout + second.stderr)
        # The first one still owns the journal: journaled RPCs succeed.
        register(first.stub, page_size=1, capacity=64)
        lease = first.stub.Acquire(CS.AcquireRequest(
            worker_id="w0", epoch=1, model="m", tokens=[5, 6, 7],
            reserve_tokens=1))
        commit = first.stub.Commit(CS.CommitRequest(
            lease_id=lease.lease_id, tokens=[5, 6, 7, 8]))
        self.assertEqual(commit.inserted_tokens, 4)
        self.assertEqual(first.stop(), 0)
        self.assertNotIn("another cache_service", first.output())


if __name__ == "__main__":
    unittest.main(verbosity=2)
