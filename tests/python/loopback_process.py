"""The project's binaries as loopback subprocesses for the cross-language
tests: a free port, a process whose output goes to a temp file, and a wait
until the process answers grpc.health.v1 with SERVING."""

import signal
import socket
import subprocess
import tempfile
import time

import grpc


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServiceProcess:
    """A binary as a subprocess, its stdout and stderr in a temp file.

    stubs: the namespace of radixkv_stubs.generate() (health_pb2 and
    health_pb2_grpc). channel_options: gRPC options of the channel that
    wait_serving returns. output_tail_chars: how much of the log output()
    returns (None = all of it)."""

    def __init__(self, args, stubs, log_prefix="radixkv_", channel_options=(),
                 output_tail_chars=None):
        self.args = args
        self.stubs = stubs
        self.channel_options = list(channel_options)
        self.output_tail_chars = output_tail_chars
        self.log = tempfile.NamedTemporaryFile(prefix=log_prefix,
                                               suffix=".log", delete=False)
        self.proc = subprocess.Popen(args, stdout=self.log,
                                     stderr=subprocess.STDOUT)

    def output(self):
        with open(self.log.name, errors="replace") as f:
            text = f.read()
        if self.output_tail_chars is None:
            return text
        return text[-self.output_tail_chars:]

    def wait_serving(self, port, timeout_s=30.0):
        """Returns a channel to 127.0.0.1:port once health says SERVING;
        AssertionError (with the log) if the process exits or the timeout
        passes first."""
        deadline = time.time() + timeout_s
        # Wait for the port with plain TCP first: a gRPC channel that dials a
        # closed port backs off for seconds before it retries.
        while True:
            if self.proc.poll() is not None:
                raise AssertionError("exited early:\n" + self.output())
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.time() > deadline:
                    raise AssertionError("port closed:\n" + self.output())
                time.sleep(0.05)
        channel = grpc.insecure_channel("127.0.0.1:%d" % port,
                                        options=self.channel_options)
        health = self.stubs.health_pb2_grpc.HealthStub(channel)
        serving = self.stubs.health_pb2.HealthCheckResponse.SERVING
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError("exited early:\n" + self.output())
            try:
                reply = health.Check(self.stubs.health_pb2.HealthCheckRequest(),
                                     timeout=1)
                if reply.status == serving:
                    return channel
            except grpc.RpcError:
                pass
            time.sleep(0.05)
        raise AssertionError("not serving:\n" + self.output())

    def alive(self):
        return self.proc.poll() is None

    def stop(self):
        """SIGTERM, then SIGKILL after 60 s; returns (exit code, output)."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return self.proc.returncode, self.output()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
