"""The main job end to end at a small size: the C++ launcher
(tools/local_cluster/local_cluster) starts redis-server, the cache service, two CPU
workers and the router, runs the workload runner on all three workloads with
the cache on and off, prints the report and stops everything; the JSON
summary holds the expected request counts, no errors, no reuse with the
cache off and less prefill with it on."""

import glob
import json
import os
import signal
import subprocess
import tempfile
import time
import unittest

ROOT = os.environ.get("RADIXKV_REPO_ROOT", os.getcwd())
LAUNCHER = os.path.join(ROOT, "tools/local_cluster/local_cluster")


class MainJobTest(unittest.TestCase):

    def test_small_main_job_reports_every_run(self):
        tmp = tempfile.mkdtemp(prefix="main_job_")
        summary = os.path.join(tmp, "runs.json")
        csv = os.path.join(tmp, "runs.csv")
        run = subprocess.run(
            [LAUNCHER, "--run_dir=" + os.path.join(tmp, "run"), "--",
             "--configs=cache_aware,cache_off,approx_tree",
             "--document_qa_configs=cache_aware,cache_off",
             "--concurrency=4",
             "--sp_groups=2", "--sp_prompts_per_group=4",
             "--sp_system_tokens=96", "--sp_question_tokens=16",
             "--sp_output_tokens=8",
             "--mt_conversations=3", "--mt_rounds=3", "--mt_system_tokens=32",
             "--mt_user_tokens=16", "--mt_output_tokens=8",
             "--dq_document_tokens=200", "--dq_questions=8",
             "--dq_question_tokens=12", "--dq_output_tokens=8",
             "--json=" + summary, "--csv=" + csv],
            capture_output=True, text=True, timeout=300)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        out = run.stdout
        for expected in ("grpc.health.v1 SERVING", "shared-prefix:",
                         "multi-turn:", "document-qa:", "prefix hit rate",
                         "TTFT ms p50/p90/p99", "all processes stopped",
                         # Workers run at nice 19 by default so that the
                         # router and cache service win the shared cores.
                         "CPU scheduling normal (nice +19)",
                         # Prompts far below the 3,072-token pools: no
                         # running request loses its KV.
                         "worker preemptions (running requests whose KV was "
                         "given back for memory, all runs): 0"):
            self.assertIn(expected, out)
        with open(os.path.join(tmp, "run", "report.txt")) as f:
            self.assertIn("multi-turn:", f.read())
        with open(summary) as f:
            runs = json.load(f)
        by = {(r["workload"], r["config"]): r for r in runs}
        self.assertEqual(len(runs), 3 + 3 + 2)
        expected_requests = {"shared-prefix": 8, "multi-turn": 9,
                             "document-qa": 8}
        for (workload, config), r in by.items():
            with self.subTest(workload=workload, config=config):
                self.assertEqual(r["errors"], 0)
                self.assertEqual(r["requests_ok"], expected_requests[workload])
                self.assertGreater(r["output_tokens_per_s"], 0)
                self.assertEqual(sum(r["requests_by_worker"].values()),
                                 r["requests_ok"])
                self.assertGreater(r["ttft_ms"]["p50"], 0)
        for workload in expected_requests:
            off = by[(workload, "cache_off")]
            on = by[(workload, "cache_aware")]
            self.assertEqual(off["cached_tokens"], 0)
            self.assertEqual(off["prefill_tokens_computed"],
                             off["prompt_tokens"])
            self.assertEqual(on["prompt_tokens"], off["prompt_tokens"])
            self.assertLess(on["prefill_tokens_computed"],
                            off["prefill_tokens_computed"], workload)
        with open(csv) as f:
            self.assertEqual(len(f.read().strip().splitlines()), 1 + len(runs))

    def _start_long_job(self, prefix):
        """Starts the launcher on minutes of shared-prefix work (it is still
        running when the test signals it); returns (process, run_dir)."""
        run_dir = os.path.join(tempfile.mkdtemp(prefix=prefix), "run")
        proc = subprocess.Popen(
            [LAUNCHER, "--run_dir=" + run_dir, "--",
             "--workloads=shared-prefix", "--configs=cache_aware",
             "--sp_groups=64", "--sp_prompts_per_group=16",
             "--sp_output_tokens=256"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        return proc, run_dir

    def _assert_nothing_left(self, run_dir, out, wait_s=0.0):
        """Nothing the job started is left: every child's command line names
        the run directory (redis --dir, runner --report_file, logs aside).
        Polls up to wait_s for kills that land asynchronously."""
        deadline = time.monotonic() + wait_s
        while True:
            left = []
            for cmdline in glob.glob("/proc/[0-9]*/cmdline"):
                try:
                    with open(cmdline, "rb") as f:
                        args = f.read().decode(errors="replace")
                except OSError:
                    continue
                if run_dir in args:
                    left.append(args.replace("\0", " "))
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        self.assertEqual(left, [], out)

    def test_ctrl_c_during_the_workload_stops_everything(self):
        # The runner ignored the launcher's SIGTERM (InitProcess's recording
        # handler), so Ctrl-C left the whole job running to its end.
        proc, run_dir = self._start_long_job("main_job_int_")
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("radixkv workload report"):
                break
        self.assertTrue(lines and lines[-1].startswith(
            "radixkv workload report"), "".join(lines))
        proc.send_signal(signal.SIGINT)
        # Generous: stopping takes seconds; the workload itself minutes.
        out, _ = proc.communicate(timeout=90)
        out = "".join(lines) + out
        self.assertEqual(proc.returncode, 130, out)
        self.assertIn("all processes stopped", out)
        self._assert_nothing_left(run_dir, out)

    def test_second_ctrl_c_kills_everything_at_once(self):
        # A second Ctrl-C while the launcher stops the cluster makes it exit
        # at once, and the children die with it.
        proc, run_dir = self._start_long_job("main_job_int2_")
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("radixkv workload report"):
                proc.send_signal(signal.SIGINT)
            if "stopping everything" in line:
                proc.send_signal(signal.SIGINT)
                break
        out, _ = proc.communicate(timeout=60)
        out = "".join(lines) + out
        self.assertEqual(proc.returncode, 130, out)
        self.assertIn("signal 2 again: killing everything now", out)
        self.assertNotIn("all processes stopped", out)
        # PR_SET_PDEATHSIG's SIGKILLs land asynchronously.
        self._assert_nothing_left(run_dir, out, wait_s=10)

if __name__ == "__main__":
    unittest.main(verbosity=2)
