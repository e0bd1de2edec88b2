// Range check of token ids, the hot part of validating a long prompt.
#ifndef RADIXKV_CACHE_SERVICE_TOKEN_RANGE_H_
#define RADIXKV_CACHE_SERVICE_TOKEN_RANGE_H_

#include <cstdint>
#include <vector>

namespace radixkv::cache_service {

// True when some token, read as uint32, is >= limit (so a negative id counts
// as huge and is caught by any limit <= 2^31). limit >= 1.
bool AnyTokenAtOrAbove(const std::vector<int32_t>& tokens, uint32_t limit);

}  // namespace radixkv::cache_service

#endif  // RADIXKV_CACHE_SERVICE_TOKEN_RANGE_H_
