// Sends a fixed set of text prompts to a router (or worker) with greedy
// sampling, all at once (so the worker batches them), and writes one line
// per prompt: its index, the generated token ids and the JSON-escaped text.
// run_gpu_backend_suite.sh's e2e step runs it against a cluster whose worker
// is --device=cpu and one whose worker is --device=gpu and diffs the files:
// the GPU worker's scheduler samples on the device (ForwardSample), the CPU
// worker's on the host, and greedy fp32 output must be identical.
//   greedy_text_client --router=127.0.0.1:50050 --out=greedy-gpu.txt
// Exit status 1 when a request fails.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "grpcpp/grpcpp.h"
#include "radixkv/v1/router.grpc.pb.h"

ABSL_FLAG(std::string, router, "127.0.0.1:50050", "Router host:port.");
ABSL_FLAG(int, max_new_tokens, 32, "Tokens per prompt (ignore_eos).");
ABSL_FLAG(std::string, out, "", "Output file; empty = stdout.");

namespace {

// Short English prompts plus repeats sharing a prefix (prefix reuse on the
// worker), 12 in all.
const char* const kPrompts[] = {
    "Copyright holders may",
    "The quick brown fox",
    "Licensed under the Apache License, Version 2.0",
    "Permission is hereby granted, free of charge, to any person",
    "In the beginning",
    "THE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND",
    "You may obtain a copy of the License at",
    "Redistribution and use in source and binary forms, with or without",
    "Redistribution and use in source and binary forms, with or without "
    "modification, are permitted",
    "Redistribution and use in source and binary forms, with or without "
    "modification, are permitted provided that the following conditions",
    "This program is free software; you can redistribute it",
    "Once upon a time",
};

std::string JsonEscape(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

struct Completion {
  grpc::Status status;
  std::vector<int32_t> tokens;
  std::string text;
};

Completion Generate(radixkv::v1::Router::Stub* stub, int index,
                    const std::string& prompt) {
  radixkv::v1::GenerateRequest request;
  request.set_request_id(absl::StrCat("greedy-", index));
  request.set_text(prompt);
  request.set_return_text(true);
  request.mutable_sampling()->set_max_new_tokens(
      absl::GetFlag(FLAGS_max_new_tokens));
  request.mutable_sampling()->set_ignore_eos(true);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(120));
  auto reader = stub->Generate(&context, request);
  Completion c;
  radixkv::v1::GenerateResponse response;
  while (reader->Read(&response)) {
    c.tokens.insert(c.tokens.end(), response.token_ids().begin(),
                    response.token_ids().end());
    c.text += response.text();
  }
  c.status = reader->Finish();
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  auto channel = grpc::CreateChannel(absl::GetFlag(FLAGS_router),
                                     grpc::InsecureChannelCredentials());
  auto stub = radixkv::v1::Router::NewStub(channel);
  constexpr int kNum = sizeof(kPrompts) / sizeof(kPrompts[0]);
  std::vector<Completion> results(kNum);
  std::vector<std::thread> threads;
  for (int i = 0; i < kNum; ++i) {
    threads.emplace_back(
        [&, i] { results[i] = Generate(stub.get(), i, kPrompts[i]); });
  }
  for (std::thread& t : threads) t.join();
  std::string text;
  int failed = 0;
  for (int i = 0; i < kNum; ++i) {
    const Completion& c = results[i];
    if (!c.status.ok()) {
      ++failed;
      std::fprintf(stderr, "prompt %d failed: %s\n", i,
                   c.status.error_message().c_str());
    }
    absl::StrAppend(&text, i, "\t", absl::StrJoin(c.tokens, ","), "\t",
                    JsonEscape(c.text), "\n");
  }
  if (absl::GetFlag(FLAGS_out).empty()) {
    std::fputs(text.c_str(), stdout);
  } else {
    std::ofstream(absl::GetFlag(FLAGS_out)) << text;
  }
  return failed == 0 ? 0 : 1;
}
