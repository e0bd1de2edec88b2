// Formatting for the worker's log lines.
#ifndef RADIXKV_WORKER_LOG_FORMAT_H_
#define RADIXKV_WORKER_LOG_FORMAT_H_

#include <string>

#include "absl/time/time.h"

namespace radixkv::worker {

// A duration for logs, rounded to milliseconds (to microseconds below one
// millisecond): "3.333s", "250ms", "2m30s", "12us", "inf". absl's
// FormatDuration alone prints every nanosecond ("3.33333333325s").
std::string FormatDurationForLog(absl::Duration d);

}  // namespace radixkv::worker

#endif  // RADIXKV_WORKER_LOG_FORMAT_H_
