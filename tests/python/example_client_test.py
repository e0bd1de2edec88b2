"""The Python example client (examples/python/stream_completion.py) streams
completions from a live local cluster started by the C++ launcher
(tools/local_cluster/local_cluster --serve: redis-server, cache service, two CPU workers,
router); the second identical prompt reuses the cached prefix; the launcher
stops everything on SIGTERM."""

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

import grpc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import radixkv_stubs  # noqa: E402

ROOT = os.environ.get("RADIXKV_REPO_ROOT", os.getcwd())
STUBS = radixkv_stubs.generate(os.path.join(ROOT, "proto"))
EXAMPLE = os.path.join(ROOT, "examples/python/stream_completion.py")
LAUNCHER = os.path.join(ROOT, "tools/local_cluster/local_cluster")


def load_example():
    spec = importlib.util.spec_from_file_location("stream_completion", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def port_open(address):
    host, port = address.rsplit(":", 1)
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, int(port))) == 0


class ExampleClientTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="example_client_")
        ready = os.path.join(cls.tmp, "ready")
        cls.launcher = subprocess.Popen(
            [LAUNCHER, "--serve", "--ready_file=" + ready,
             "--run_dir=" + os.path.join(cls.tmp, "run")],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.time() + 90
        while not os.path.exists(ready):
            if cls.launcher.poll() is not None or time.time() > deadline:
                out = cls.launcher.communicate(timeout=30)[0] \
                    if cls.launcher.poll() is not None else ""
                cls.launcher.kill()
                raise AssertionError("cluster did not start:\n" + out)
            time.sleep(0.1)
        with open(ready) as f:
            cls.router, cls.cache_service = f.read().split()[:2]

    @classmethod
    def tearDownClass(cls):
        if cls.launcher.poll() is None:
            cls.launcher.kill()
            cls.launcher.wait()

    def test_1_streams_text_and_reuses_the_prefix_on_repeat(self):
        example = load_example()
        prompt = ("Licensed under the Apache License, Version 2.0 (the "
                  "\"License\"); you may not use this file except in "
                  "compliance with the License.")
        text1, ids1, last1 = example.stream_completion(
            STUBS, self.router, prompt, max_new_tokens=24, ignore_eos=True,
            out=None)
        self.assertEqual(len(ids1), 24)
        self.assertTrue(text1.strip(), "no text streamed")
        self.assertTrue(last1.finished)
        self.assertEqual(last1.finish_reason, STUBS.common_pb2.FINISH_REASON_LENGTH)
        self.assertIn(last1.worker_id, ("worker-0", "worker-1"))
        self.assertEqual(last1.usage.cached_tokens, 0)
        prompt_tokens = last1.usage.prompt_tokens
        self.assertGreater(prompt_tokens, 10)
        # The same prompt again: greedy, so the same text; its prompt is now
        # cached on the worker that served it, and the router goes there.
        text2, ids2, last2 = example.stream_completion(
            STUBS, self.router, prompt, max_new_tokens=24, ignore_eos=True,
            out=None)
        self.assertEqual(ids2, ids1)
        self.assertEqual(text2, text1)
        self.assertEqual(last2.worker_id, last1.worker_id)
        self.assertEqual(last2.usage.cached_tokens, prompt_tokens - 1)

    def test_2_command_line_prints_text_and_summary(self):
        tmp = tempfile.mkdtemp(prefix="example_client_tmp_")
        out = subprocess.run(
            [sys.executable, EXAMPLE, "--router", self.router,
             "--proto_root", os.path.join(ROOT, "proto"),
             "--prompt", "Everyone is permitted to copy and distribute",
             "--max_new_tokens", "16"],
            capture_output=True, text=True, timeout=60,
            env=dict(os.environ, TMPDIR=tmp))
        self.assertEqual(out.returncode, 0, out.stderr)
        # The stubs generated at start are gone at exit (no
        # radixkv_stubs_* folder is left behind).
        self.assertEqual(os.listdir(tmp), [])
        os.rmdir(tmp)
        lines = out.stdout.strip().splitlines()
        self.assertRegex(lines[-1], r"^\[worker worker-[01] \| prompt \d+, "
                                    r"cached \d+, completion \d+ tokens \| "
                                    r"FINISH_REASON_(LENGTH|EOS)")
        self.assertTrue("".join(lines[:-1]).strip(), out.stdout)

    def test_3_bad_request_reports_the_router_status(self):
        example = load_example()
        with self.assertRaises(grpc.RpcError) as err:
            example.stream_completion(STUBS, self.router, "hello",
                                      max_new_tokens=0, out=None)
        self.assertEqual(err.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)

    def test_4_launcher_stops_everything_on_sigterm(self):
        self.launcher.send_signal(signal.SIGTERM)
        out = self.launcher.communicate(timeout=60)[0]
        self.assertEqual(self.launcher.returncode, 130, out)
        self.assertIn("all processes stopped", out)
        self.assertFalse(port_open(self.router), "router still listening")
        self.assertFalse(port_open(self.cache_service),
                         "cache service still listening")


if __name__ == "__main__":
    unittest.main(verbosity=2)
