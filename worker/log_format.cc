#include "worker/log_format.h"

namespace radixkv::worker {

std::string FormatDurationForLog(absl::Duration d) {
  if (d == absl::InfiniteDuration() || d == -absl::InfiniteDuration()) {
    return absl::FormatDuration(d);
  }
  const absl::Duration unit = absl::AbsDuration(d) < absl::Milliseconds(1)
                                  ? absl::Microseconds(1)
                                  : absl::Milliseconds(1);
  return absl::FormatDuration(absl::Floor(d + unit / 2, unit));
}

}  // namespace radixkv::worker
