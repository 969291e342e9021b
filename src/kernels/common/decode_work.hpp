// The arithmetic a decode CTA does on its sequence's device-side values and its split, in host-device code so
// that the CPU tests check it over every case (tests/cpu/test_kvcache_plan.cpp); kernels/sm90/decode/work.cuh
// applies it.
#pragma once

#include "kernels/common/host_device.hpp"

namespace flash4::decode {

// Whether a sequence's device-side values are usable: `cached` keys in the cache (cache_seqlens[b]) with
// `appended` more to write, inside `capacity`; not paged, `cache_seq` (cache_batch_idx[b]) must name one of
// `cache_batch` cache sequences. Written so that no int value overflows.
FLASH4_HD bool sequence_is_valid(int cached, int appended, int capacity, bool paged, int cache_seq, int cache_batch) {
  return cached >= 0 && cached <= capacity - appended && (paged || (cache_seq >= 0 && cache_seq < cache_batch));
}

// Split `split` of `splits`' share of the key blocks [begin, end): equal shares of ceil(count / splits)
// blocks in order, the last ones shorter or empty. An empty share is [begin, begin).
struct BlockShare {
  int begin;
  int end;
};

FLASH4_HD BlockShare split_share(int begin, int end, int splits, int split) {
  const int count = end > begin ? end - begin : 0;
  const int per_split = (count + splits - 1) / splits;
  const int first = begin + split * per_split;
  if (count == 0 || first >= end) return BlockShare{begin, begin};
  return BlockShare{first, end < first + per_split ? end : first + per_split};
}

}  // namespace flash4::decode
