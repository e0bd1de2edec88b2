"""Each radixkv binary starts, answers grpc.health.v1 through a Python client
generated from proto/, serves its own service's RPCs, rejects bad flags, and
exits 0 on SIGTERM."""

import os
import signal
import subprocess
import sys
import time
import unittest

import grpc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import radixkv_stubs  # noqa: E402
from loopback_process import free_port  # noqa: E402

ROOT = os.environ.get("RADIXKV_REPO_ROOT", os.getcwd())
STUBS = radixkv_stubs.generate(os.path.join(ROOT, "proto"))
BINARIES = {
    "cache_service": os.path.join(ROOT, "cache_service/cache_service"),
    "router": os.path.join(ROOT, "router/router"),
    "worker": os.path.join(ROOT, "worker/worker"),
}


def wait_serving(port, timeout_s=30.0):
    channel = grpc.insecure_channel("127.0.0.1:%d" % port)
    stub = STUBS.health_pb2_grpc.HealthStub(channel)
    deadline = time.time() + timeout_s
    last = None
    while time.time() < deadline:
        try:
            reply = stub.Check(STUBS.health_pb2.HealthCheckRequest(), timeout=1)
            if reply.status == STUBS.health_pb2.HealthCheckResponse.SERVING:
                return channel
            last = reply.status
        except grpc.RpcError as e:  # not up yet
            last = e.code()
        time.sleep(0.1)
    raise AssertionError("port %d not SERVING after %.0fs (last: %s)" %
                         (port, timeout_s, last))


class ProcessHealthTest(unittest.TestCase):

    def start(self, name, extra_args=()):
        port = free_port()
        args = [BINARIES[name], "--bind_address=127.0.0.1",
                "--grpc_port=%d" % port, "--metrics_port=0"] + list(extra_args)
        proc = subprocess.Popen(args, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        channel = wait_serving(port)
        return proc, port, channel

    def stop(self, proc):
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        self.assertEqual(proc.returncode, 0, out)
        self.assertIn("stopped cleanly", out)

    def test_each_binary_serves_health_and_stops_on_sigterm(self):
        for name in BINARIES:
            with self.subTest(binary=name):
                proc, port, channel = self.start(name)
                health = STUBS.health_pb2_grpc.HealthStub(channel)
                reply = health.Check(STUBS.health_pb2.HealthCheckRequest())
                self.assertEqual(reply.status,
                                 STUBS.health_pb2.HealthCheckResponse.SERVING)
                with self.assertRaises(grpc.RpcError) as err:
                    health.Check(STUBS.health_pb2.HealthCheckRequest(
                        service="no.such.Service"))
                self.assertEqual(err.exception.code(), grpc.StatusCode.NOT_FOUND)
                channel.close()
                self.stop(proc)

    def test_check_flags_mode(self):
        for name, binary in BINARIES.items():
            with self.subTest(binary=name):
                ok = subprocess.run([binary, "--check_flags"], capture_output=True,
                                    text=True, timeout=30)
                self.assertEqual(ok.returncode, 0, ok.stderr)
                self.assertIn("flags ok", ok.stdout)
                bad = subprocess.run([binary, "--check_flags", "--grpc_port=70000"],
                                     capture_output=True, text=True, timeout=30)
                self.assertEqual(bad.returncode, 2)
                self.assertIn("grpc_port", bad.stderr)

    def test_help_lists_the_binary_flags(self):
        # Their flags are in <package>/main.cc, which Abseil's --help did
        # not list ("No flags matched").
        expected = {
            "cache_service": ["--redis", "--eviction_policy"],
            "router": ["--cache_service", "--policy"],
            "worker": ["--model_dir", "--kv_capacity_tokens"],
        }
        for name, binary in BINARIES.items():
            with self.subTest(binary=name):
                run = subprocess.run([binary, "--help"], capture_output=True,
                                     text=True, timeout=30)
                out = run.stdout + run.stderr
                self.assertNotIn("No flags matched", out)
                for flag in expected[name] + ["--grpc_port", "--metrics_port",
                                              "--bind_address", "--check_flags"]:
                    self.assertIn(flag + " (", out)


if __name__ == "__main__":
    unittest.main(verbosity=2)
