// Implements random_params.hpp.
#include "contract/random_params.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>

namespace flash4::contract {

constexpr std::int32_t kInt32Max = std::numeric_limits<std::int32_t>::max();
constexpr std::int32_t kInt32Min = std::numeric_limits<std::int32_t>::min();
// Buffers 2^44 bytes apart: no two overlap unless a mutation makes them (the largest tensor validation
// accepts, 2^31 row-heads of 256 elements with 2^39-element strides, can still reach past that).
constexpr int kSlotShift = 44;

struct RandomParams::Shape {
  std::int32_t batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, head_dim_v;  // head_dim_v: 0 or its own
  bool varlen;
  std::int32_t max_seqlen_q, max_seqlen_k, total_q, total_k;
};

std::int32_t RandomParams::edge_int() {
  return pick<std::int32_t>({-2, -1, 0, 1, 2, 7, 8, 63, 64, 65, 127, 128, 129, 255, 256, (1 << 29) - 1, 1 << 29,
                             (1 << 29) + 1, 1 << 30, kInt32Max - 127, kInt32Max, kInt32Min,
                             static_cast<std::int32_t>(rng_())});
}

// A sequence length: mostly small, sometimes near the limits.
std::int32_t RandomParams::length(bool allow_huge) {
  if (chance(0.7)) return static_cast<std::int32_t>(uniform(0, 300));
  if (chance(0.6) || !allow_huge) return static_cast<std::int32_t>(uniform(0, 1 << 16));
  return pick<std::int32_t>({1 << 24, (1 << 29) - 1, 1 << 29, (1 << 29) + 1, 1 << 30, kInt32Max});
}

RandomParams::Shape RandomParams::shape() {
  Shape s{};
  s.batch = chance(0.8) ? static_cast<std::int32_t>(uniform(1, 8)) : pick<std::int32_t>({64, 1024, 1 << 16, 1 << 20});
  s.heads_kv = chance(0.8) ? pick<std::int32_t>({1, 2, 4}) : pick<std::int32_t>({8, 16, 64, 1 << 10});
  s.heads_q = s.heads_kv * pick<std::int32_t>({1, 1, 2, 4, 8});
  s.head_dim = pick<std::int32_t>({64, 96, 128, 192, 256, 8, 40, 72, 136, 200, 248});
  s.head_dim_v = chance(0.8) ? 0 : pick<std::int32_t>({128, 64, 8, 256, s.head_dim});
  const bool huge = chance(0.15);
  s.seqlen_q = length(huge);
  s.seqlen_k = length(huge);
  s.varlen = chance(0.35);
  if (s.varlen) {
    s.max_seqlen_q = std::max(1, length(huge));
    s.max_seqlen_k = std::max(1, length(huge));
    // Totals a batch of such sequences can hold; sometimes a max_seqlen far above them.
    s.total_q = static_cast<std::int32_t>(uniform(0, std::min<std::int64_t>(kInt32Max, std::int64_t{s.batch} * s.max_seqlen_q)));
    s.total_k = static_cast<std::int32_t>(uniform(0, std::min<std::int64_t>(kInt32Max, std::int64_t{s.batch} * s.max_seqlen_k)));
    if (chance(0.1)) s.max_seqlen_q = kInt32Max;
  }
  return s;
}

// Element strides of one tensor: contiguous, padded, heads outermost, or q/k/v packed in one buffer. value: v,
// o, dout or dv, whose rows are head_dim_v wide when it is set.
flash4_strides RandomParams::layout(const Shape& s, bool query, bool value) {
  const std::int64_t heads = query ? s.heads_q : s.heads_kv;
  const std::int64_t seqlen = s.varlen ? 1 : std::max(1, query ? s.seqlen_q : s.seqlen_k);
  const std::int64_t d = value && s.head_dim_v != 0 ? s.head_dim_v : s.head_dim;
  const std::int64_t pad = chance(0.3) ? 8 * uniform(1, 4) : 0;
  switch (uniform(0, 3)) {
    case 0:  // (batch, seq, head, dim), maybe padded
      return {seqlen * heads * (d + pad) + pad, heads * (d + pad), d + pad};
    case 1:  // heads outermost within a batch entry: (batch, head, seq, dim)
      return {heads * seqlen * (d + pad) + pad, d + pad, seqlen * (d + pad)};
    case 2:  // one of three tensors packed per row: (batch, seq, 3, head, dim)
      return {seqlen * 3 * heads * d, 3 * heads * d, d};
    default:  // contiguous
      return {seqlen * heads * d, heads * d, d};
  }
}

// The buffer of tensor `slot`, 2^44 bytes from the others.
const void* RandomParams::pointer(int slot) {
  return reinterpret_cast<const void*>(static_cast<std::uintptr_t>(slot + 1) << kSlotShift);
}

float RandomParams::scale() {
  return pick<float>({0.125f, 0.0883883f, 1.0f, 0.0f, -1.0f, NAN, INFINITY, FLT_MAX, FLT_MAX / 2, FLT_MIN, 1e-45f,
                      2.3e38f, 30.0f, static_cast<float>(uniform(1, 1000)) / 64});
}

template <class Params>
void RandomParams::fill(Params& p, const Shape& s) {
  p.struct_size = sizeof(Params);
  p.dtype = chance(0.5) ? FLASH4_DTYPE_BF16 : FLASH4_DTYPE_FP16;
  p.batch = s.batch;
  p.seqlen_q = s.seqlen_q;
  p.seqlen_k = s.seqlen_k;
  p.heads_q = s.heads_q;
  p.heads_kv = s.heads_kv;
  p.head_dim = s.head_dim;
  p.head_dim_v = s.head_dim_v;
  p.softmax_scale = chance(0.9) ? 1.0f / std::sqrt(static_cast<float>(s.head_dim)) : scale();
  p.softcap = chance(0.7) ? 0.0f : chance(0.7) ? 30.0f : scale();
  p.causal = chance(0.5);
  p.window_left = chance(0.6) ? -1 : chance(0.7) ? static_cast<std::int32_t>(uniform(0, 512)) : edge_int();
  p.window_right = chance(0.6) ? -1 : chance(0.7) ? static_cast<std::int32_t>(uniform(0, 512)) : edge_int();
  if (s.varlen) {
    p.cu_seqlens_q = static_cast<const std::int32_t*>(pointer(12));
    p.cu_seqlens_k = static_cast<const std::int32_t*>(pointer(13));
    p.max_seqlen_q = s.max_seqlen_q;
    p.max_seqlen_k = s.max_seqlen_k;
    p.total_q = s.total_q;
    p.total_k = s.total_k;
  }
  p.q = pointer(0);
  p.k = pointer(1);
  p.v = pointer(2);
  p.q_strides = layout(s, true, false);
  p.k_strides = layout(s, false, false);
  p.v_strides = chance(0.5) && s.head_dim_v == 0 ? p.k_strides : layout(s, false, true);
  p.o_strides = layout(s, true, true);
  // Sinks and seqused in some calls (slots 9-11 and 15): buffers of their own.
  if (chance(0.2)) p.sink = static_cast<const float*>(pointer(9));
  if (chance(0.15)) p.seqused_q = static_cast<const std::int32_t*>(pointer(10));
  if (chance(0.15)) p.seqused_k = static_cast<const std::int32_t*>(pointer(11));
  if constexpr (sizeof(Params) == sizeof(flash4_bwd_params)) {
    if (p.sink != nullptr) p.dsink = static_cast<float*>(const_cast<void*>(pointer(15)));
    p.o = pointer(3);
    p.dout = pointer(4);
    p.lse = static_cast<const float*>(pointer(5));
    p.dq = const_cast<void*>(pointer(6));
    p.dk = const_cast<void*>(pointer(7));
    p.dv = const_cast<void*>(pointer(8));
    p.dout_strides = layout(s, true, true);
    p.dq_strides = layout(s, true, false);
    p.dk_strides = layout(s, false, false);
    p.dv_strides = layout(s, false, true);
    p.deterministic = chance(0.3);
  } else {
    p.o = const_cast<void*>(pointer(3));
    p.lse = chance(0.8) ? static_cast<float*>(const_cast<void*>(pointer(5))) : nullptr;
    if (chance(0.25)) fill_paged(p, s);
  }
}

// k and v as a paged cache, with a block table mostly as long as rule 6 asks, sometimes not.
void RandomParams::fill_paged(flash4_fwd_params& p, const Shape& s) {
  p.block_table = static_cast<const std::int32_t*>(pointer(14));
  p.page_size = chance(0.8) ? pick<std::int32_t>({16, 48, 64, 128, 256}) : pick<std::int32_t>({0, 8, 24, -16, edge_int()});
  p.num_pages = chance(0.8) ? static_cast<std::int32_t>(uniform(1, 4096)) : edge_int();
  const std::int64_t rows = std::max(1, p.page_size);
  const std::int64_t heads = s.heads_kv;
  const std::int64_t d = s.head_dim;
  p.k_strides = p.v_strides = {rows * heads * d, heads * d, d};
  const std::int64_t longest = s.varlen ? std::min(s.max_seqlen_k, s.total_k) : s.seqlen_k;
  const std::int64_t pages = (longest + rows - 1) / rows;
  p.block_table_stride = pages + pick<std::int64_t>({0, 0, 3, -1, std::int64_t{1} << 61, std::int64_t{1} << 40});
}

// One edge value in one field, or one random byte anywhere in the struct.
template <class Params>
void RandomParams::mutate(Params& p) {
  auto& bytes = reinterpret_cast<unsigned char(&)[sizeof(Params)]>(p);
  const void* other = pointer(static_cast<int>(uniform(0, 15)));
  const std::uintptr_t shift = pick<std::uintptr_t>({2, 4, 8, 16, 4096, 0});
  const auto moved = [&](const void* base) {
    return reinterpret_cast<const void*>(reinterpret_cast<std::uintptr_t>(base) + shift);
  };
  switch (uniform(0, 16)) {
    case 0: p.batch = edge_int(); break;
    case 1: (chance(0.5) ? p.seqlen_q : p.seqlen_k) = edge_int(); break;
    case 2: (chance(0.5) ? p.heads_q : p.heads_kv) = edge_int(); break;
    case 3: (chance(0.5) ? p.head_dim : p.head_dim_v) = edge_int(); break;
    case 4: (chance(0.5) ? p.max_seqlen_q : p.max_seqlen_k) = edge_int(); break;
    case 5: (chance(0.5) ? p.total_q : p.total_k) = edge_int(); break;
    case 6: (chance(0.5) ? p.window_left : p.window_right) = edge_int(); break;
    case 7: p.causal = edge_int(); break;
    case 8: (chance(0.5) ? p.softmax_scale : p.softcap) = scale(); break;
    case 9: {  // dtype as raw bytes: any int32, as a C caller can pass
      const std::int32_t raw = pick<std::int32_t>({2, -1, 255, 0, 1, static_cast<std::int32_t>(rng_())});
      std::memcpy(&p.dtype, &raw, sizeof(raw));
      break;
    }
    case 10: {  // an output moved onto another buffer, or within its own
      p.o = const_cast<void*>(moved(chance(0.5) ? other : p.o));
      break;
    }
    case 11: {  // a stride field set to an edge value
      flash4_strides& s = *pick<flash4_strides*>({&p.q_strides, &p.k_strides, &p.v_strides, &p.o_strides});
      std::int64_t& field = *pick<std::int64_t*>({&s.batch, &s.seq, &s.head});
      field = pick<std::int64_t>({0, -8, 8, 4, 64, field + 2, field - 8, std::int64_t{1} << 39, (std::int64_t{1} << 39) - 8});
      break;
    }
    case 12: {  // a pointer NULL, misaligned, near the end of the address space, or one of the cu_seqlens
      const void* value = pick<const void*>({nullptr, moved(p.q), reinterpret_cast<const void*>(~std::uintptr_t{4095})});
      if (chance(0.5)) p.q = value; else p.cu_seqlens_q = static_cast<const std::int32_t*>(value);
      break;
    }
    case 13: p.struct_size = pick<std::size_t>({0, sizeof(Params) - 8, sizeof(Params) + 8, sizeof(flash4_fwd_params), sizeof(flash4_bwd_params), offsetof(Params, head_dim_v)}); break;
    case 14: {  // a sink or seqused pointer NULL, misaligned, near the end of the address space or onto another
      const void* value = pick<const void*>({nullptr, moved(other), reinterpret_cast<const void*>(~std::uintptr_t{3})});
      switch (uniform(0, 2)) {
        case 0: p.sink = static_cast<const float*>(value); break;
        case 1: p.seqused_q = static_cast<const std::int32_t*>(value); break;
        default: p.seqused_k = static_cast<const std::int32_t*>(value); break;
      }
      break;
    }
    default: bytes[uniform(0, sizeof(Params) - 1)] = static_cast<unsigned char>(rng_()); break;
  }
  if constexpr (sizeof(Params) == sizeof(flash4_bwd_params)) {
    if (chance(0.3)) {  // a gradient onto another buffer (or another gradient), or deterministic off its range
      void** gradient = pick<void**>({&p.dq, &p.dk, &p.dv});
      *gradient = const_cast<void*>(moved(other));
    }
    if (chance(0.05)) p.dsink = chance(0.5) ? nullptr : static_cast<float*>(const_cast<void*>(moved(other)));
    if (chance(0.05)) p.deterministic = edge_int();
  }
}

template <class Params>
Params RandomParams::make() {
  Params p{};
  if (chance(0.02)) {
    for (auto& byte : reinterpret_cast<unsigned char(&)[sizeof(p)]>(p)) byte = static_cast<unsigned char>(rng_());
    if (chance(0.5)) p.struct_size = sizeof(p);
    return p;
  }
  fill(p, shape());
  for (int m = static_cast<int>(uniform(0, 2)); m > 0; --m) mutate(p);
  return p;
}

flash4_fwd_params RandomParams::fwd() { return make<flash4_fwd_params>(); }
flash4_bwd_params RandomParams::bwd() { return make<flash4_bwd_params>(); }

}  // namespace flash4::contract
