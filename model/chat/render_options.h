// Limits and the clock of a chat template render.
#ifndef RADIXKV_MODEL_CHAT_RENDER_OPTIONS_H_
#define RADIXKV_MODEL_CHAT_RENDER_OPTIONS_H_

#include <cstddef>
#include <cstdint>
#include <functional>

#include "absl/time/civil_time.h"

namespace radixkv::model::chat {

// Bounds on one render, so that no template or input can run forever or
// allocate without limit. Exceeding one fails the render with
// RESOURCE_EXHAUSTED naming the limit.
struct RenderLimits {
  // Bytes of rendered text (also of any macro's or block's output).
  size_t max_output_bytes = size_t{64} << 20;
  // Bytes of any single string, repr or JSON text built during the render.
  size_t max_string_bytes = size_t{64} << 20;
  // Cumulative bytes of strings and list slots built plus string bytes
  // scanned by string operations: bounds both memory and time.
  uint64_t max_work_bytes = uint64_t{1} << 30;
  // Statements executed, expressions evaluated and loop iterations.
  int64_t max_steps = 20'000'000;
  // Nested macro and caller invocations.
  int max_call_depth = 100;
};

// A naive local date and time, as Python's datetime.now() returns.
struct LocalDateTime {
  absl::CivilSecond time;
  int microsecond = 0;
};

// The wall clock behind `strftime_now`.
using LocalClock = std::function<LocalDateTime()>;

// The machine's clock in its local time zone.
LocalClock SystemLocalClock();

}  // namespace radixkv::model::chat

#endif  // RADIXKV_MODEL_CHAT_RENDER_OPTIONS_H_
