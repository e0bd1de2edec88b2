#!/usr/bin/python3
"""Streams a completion from a radixkv router (Debian python3-grpcio).

Usage (from the repository root, with a cluster running, e.g.
`bazel-bin/tools/local_cluster/local_cluster --serve --base_port=50100`, whose router
listens on 127.0.0.1:50102; without --base_port it prints the port it
picked):

  /usr/bin/python3 examples/python/stream_completion.py \
      --router 127.0.0.1:50102 --prompt "Licensed under the Apache License"

Prints the text as it streams, then one summary line: worker, prompt /
cached / completion tokens, finish reason. The gRPC stubs are generated from
proto/ at start (tests/python/radixkv_stubs.py, grpc_tools from Debian's
python3-grpc-tools)."""

import argparse
import os
import sys
import time

import grpc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
import radixkv_stubs  # noqa: E402


def stream_completion(stubs, router_address, prompt, max_new_tokens=32,
                      temperature=0.0, request_id="", timeout_s=60.0,
                      ignore_eos=False, out=sys.stdout):
    """Streams one Router.Generate; returns (text, token_ids, last_chunk).
    Raises grpc.RpcError with the router's status on failure."""
    channel = grpc.insecure_channel(router_address)
    router = stubs.router_pb2_grpc.RouterStub(channel)
    request = stubs.common_pb2.GenerateRequest(
        request_id=request_id,
        text=prompt,
        return_text=True,
        sampling=stubs.common_pb2.SamplingParams(
            max_new_tokens=max_new_tokens, temperature=temperature,
            ignore_eos=ignore_eos))
    text, token_ids, last = [], [], None
    try:
        for chunk in router.Generate(request, timeout=timeout_s):
            text.append(chunk.text)
            token_ids.extend(chunk.token_ids)
            last = chunk
            if out is not None:
                out.write(chunk.text)
                out.flush()
    finally:
        channel.close()
    return "".join(text), token_ids, last


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--router", default="127.0.0.1:50050",
                        help="router host:port")
    parser.add_argument("--prompt", default="Licensed under the Apache License",
                        help="prompt text (the worker prepends BOS)")
    parser.add_argument("--max_new_tokens", type=int, default=48)
    parser.add_argument("--temperature", type=float, default=0.0,
                        help="0 = greedy")
    parser.add_argument("--proto_root", default=os.path.join(ROOT, "proto"))
    args = parser.parse_args()
    stubs = radixkv_stubs.generate(args.proto_root)
    start = time.time()
    try:
        _, token_ids, last = stream_completion(
            stubs, args.router, args.prompt, args.max_new_tokens,
            args.temperature)
    except grpc.RpcError as e:
        sys.exit("\nrouter error %s: %s" % (e.code().name, e.details()))
    usage = last.usage
    reason = stubs.common_pb2.FinishReason.Name(last.finish_reason)
    print("\n[worker %s | prompt %d, cached %d, completion %d tokens | %s | "
          "%.2f s]" % (last.worker_id, usage.prompt_tokens, usage.cached_tokens,
                       len(token_ids), reason, time.time() - start))


if __name__ == "__main__":
    main()
