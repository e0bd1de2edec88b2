"""Generates Python gRPC stubs for proto/ (radixkv.v1 and grpc.health.v1) into
a temporary directory with grpc_tools.protoc (Debian python3-grpc-tools) and
imports them. Used by the cross-language tests and examples; run with
/usr/bin/python3 (the interpreter that has python3-grpcio)."""

import atexit
import importlib
import os
import shutil
import sys
import tempfile

from grpc_tools import protoc

PROTO_FILES = [
    "radixkv/v1/common.proto",
    "radixkv/v1/cache_service.proto",
    "radixkv/v1/worker.proto",
    "radixkv/v1/router.proto",
    "grpc/health/v1/health.proto",
]


def generate(proto_root):
    """Compiles PROTO_FILES under proto_root; returns a namespace of modules."""
    out = tempfile.mkdtemp(prefix="radixkv_stubs_")
    # The modules are imported below; the files can go when the process
    # ends, so no client run or test leaves a folder in /tmp.
    atexit.register(shutil.rmtree, out, True)
    args = ["protoc", "-I" + proto_root, "--python_out=" + out,
            "--grpc_python_out=" + out] + PROTO_FILES
    if protoc.main(args) != 0:
        raise RuntimeError("protoc failed for " + proto_root)
    # grpc/health would shadow the grpc package: rename the generated folder.
    os.rename(os.path.join(out, "grpc"), os.path.join(out, "grpc_health_gen"))
    for d in ("radixkv", "radixkv/v1", "grpc_health_gen", "grpc_health_gen/health",
              "grpc_health_gen/health/v1"):
        open(os.path.join(out, d, "__init__.py"), "a").close()
    sys.path.insert(0, out)
    # The generated health_pb2_grpc imports "grpc.health.v1.health_pb2".
    path = os.path.join(out, "grpc_health_gen/health/v1/health_pb2_grpc.py")
    src = open(path).read().replace("from grpc.health.v1 import",
                                    "from grpc_health_gen.health.v1 import")
    open(path, "w").write(src)

    class Stubs:
        pass

    s = Stubs()
    for name in ("common", "cache_service", "worker", "router"):
        setattr(s, name + "_pb2", importlib.import_module("radixkv.v1.%s_pb2" % name))
        setattr(s, name + "_pb2_grpc",
                importlib.import_module("radixkv.v1.%s_pb2_grpc" % name))
    s.health_pb2 = importlib.import_module("grpc_health_gen.health.v1.health_pb2")
    s.health_pb2_grpc = importlib.import_module(
        "grpc_health_gen.health.v1.health_pb2_grpc")
    return s
