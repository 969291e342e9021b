// Implements seed_cases.hpp.
#include "contract/seed_cases.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

namespace flash4::contract {
namespace {

constexpr std::int32_t kInt32Max = std::numeric_limits<std::int32_t>::max();

// Distinct buffers 2^44 bytes apart, as in random_params.cpp.
template <class T = void>
T* buffer(int slot) {
  return reinterpret_cast<T*>(static_cast<std::uintptr_t>(slot + 1) << 44);
}

flash4_strides contiguous(std::int64_t seqlen, std::int64_t heads, std::int64_t head_dim) {
  return {seqlen * heads * head_dim, heads * head_dim, head_dim};
}

template <class Params>
Params base(int batch, int seqlen_q, int seqlen_k, int heads, int head_dim) {
  Params p{};
  p.struct_size = sizeof(p);
  p.dtype = FLASH4_DTYPE_BF16;
  p.batch = batch;
  p.seqlen_q = seqlen_q;
  p.seqlen_k = seqlen_k;
  p.heads_q = p.heads_kv = heads;
  p.head_dim = head_dim;
  p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  p.window_left = p.window_right = -1;
  p.q = buffer(0);
  p.k = buffer(1);
  p.v = buffer(2);
  p.o = buffer(3);
  p.q_strides = p.o_strides = contiguous(std::max(seqlen_q, 1), heads, head_dim);
  p.k_strides = p.v_strides = contiguous(std::max(seqlen_k, 1), heads, head_dim);
  if constexpr (std::is_same_v<Params, flash4_bwd_params>) {
    p.dout = buffer(4);
    p.lse = buffer<const float>(5);
    p.dq = buffer(6);
    p.dk = buffer(7);
    p.dv = buffer(8);
    p.dout_strides = p.dq_strides = p.o_strides;
    p.dk_strides = p.dv_strides = p.k_strides;
  } else {
    p.lse = buffer<float>(5);
  }
  return p;
}

template <class Params>
Params varlen(Params p, int total_q, int max_seqlen_q, int total_k, int max_seqlen_k) {
  p.cu_seqlens_q = buffer<const std::int32_t>(12);
  p.cu_seqlens_k = buffer<const std::int32_t>(13);
  p.total_q = total_q;
  p.max_seqlen_q = max_seqlen_q;
  p.total_k = total_k;
  p.max_seqlen_k = max_seqlen_k;
  p.q_strides = p.o_strides = contiguous(1, p.heads_q, p.head_dim);
  p.k_strides = p.v_strides = contiguous(1, p.heads_kv, p.head_dim);
  if constexpr (std::is_same_v<Params, flash4_bwd_params>) {
    p.dout_strides = p.dq_strides = p.o_strides;
    p.dk_strides = p.dv_strides = p.k_strides;
  }
  return p;
}

template <class Params>
Params with_dtype(Params p, std::int32_t raw) {
  std::memcpy(&p.dtype, &raw, sizeof(raw));
  return p;
}

using Fwd = flash4_fwd_params;
using Bwd = flash4_bwd_params;

}  // namespace

std::vector<SeedCase> seed_cases() {
  std::vector<SeedCase> cases;
  const Fwd fwd = base<Fwd>(2, 128, 256, 4, 128);
  const Bwd bwd = base<Bwd>(2, 128, 256, 4, 128);
  cases.push_back({"valid forward", fwd});
  cases.push_back({"valid backward", bwd});
  // Finding 1: the backward's workspace sized at 1 KiB for a 132 MB dQ accumulator.
  cases.push_back({"bwd varlen max_seqlen_q 2^31-1", varlen(base<Bwd>(1, 0, 0, 1, 128), 258041, kInt32Max, 1000, 1000)});
  // Finding 2: int overflow in the planners, on inputs that passed validation.
  cases.push_back({"fwd seqlen_q 2^31-1", base<Fwd>(1, kInt32Max, 128, 1, 128)});
  cases.push_back({"fwd varlen max_seqlen_q 2^31-1", varlen(base<Fwd>(1, 0, 0, 1, 128), 258041, kInt32Max, 1000, 1000)});
  cases.push_back({"fwd varlen 2^34 blocks", varlen(base<Fwd>(1 << 16, 0, 0, 16, 128), 1 << 20, 1 << 20, 64, 64)});
  cases.push_back({"fwd seqlen_q at the limit", base<Fwd>(1, 1 << 29, 128, 1, 64)});
  cases.push_back({"fwd seqlen_q past the limit", base<Fwd>(1, (1 << 29) + 1, 128, 1, 64)});
  // Finding 3: dtype out of the enum's range.
  for (const std::int32_t raw : {2, -1, 255}) {
    cases.push_back({"fwd dtype " + std::to_string(raw), with_dtype(fwd, raw)});
    cases.push_back({"bwd dtype " + std::to_string(raw), with_dtype(bwd, raw)});
  }
  // Finding 4: accepted but wrong.
  Fwd overlapping = fwd;
  overlapping.o_strides.head = 8;
  cases.push_back({"fwd o head stride 8 at D=128", overlapping});
  for (const void* input : {fwd.q, fwd.k, fwd.v}) {
    Fwd aliased = fwd;
    aliased.o = const_cast<void*>(input);
    cases.push_back({"fwd o aliasing an input", aliased});
  }
  Bwd aliased_grad = bwd;
  aliased_grad.dq = const_cast<void*>(bwd.dout);
  cases.push_back({"bwd dq aliasing dout", aliased_grad});
  cases.push_back({"fwd varlen total_q > batch x max_seqlen_q", varlen(fwd, 257, 128, 512, 256)});
  Fwd huge_scale = fwd;
  huge_scale.softmax_scale = FLT_MAX;
  cases.push_back({"fwd softmax_scale FLT_MAX", huge_scale});
  Fwd tiny_cap = fwd;
  tiny_cap.softcap = 1e-45f;
  cases.push_back({"fwd softcap 1e-45", tiny_cap});
  // Issue 27: causal with a right window edge other than 0 or -1 reads as right edge 0.
  Fwd causal_window = fwd;
  causal_window.causal = 1;
  causal_window.window_left = 64;
  causal_window.window_right = 16;
  cases.push_back({"fwd causal with window_right 16", causal_window});
  Bwd wide_window = bwd;
  wide_window.window_left = wide_window.window_right = kInt32Max;
  cases.push_back({"bwd windows of 2^31-1", wide_window});
  return cases;
}

std::vector<unsigned char> encode(const SeedCase& c) {
  return std::visit(
      [&](const auto& p) {
        std::vector<unsigned char> bytes(1 + sizeof(p), static_cast<unsigned char>(c.params.index()));
        std::memcpy(bytes.data() + 1, &p, sizeof(p));
        return bytes;
      },
      c.params);
}

std::variant<flash4_fwd_params, flash4_bwd_params> decode(const unsigned char* data, std::size_t size) {
  const auto copy = [&](auto params) -> std::variant<flash4_fwd_params, flash4_bwd_params> {
    if (size > 1) std::memcpy(&params, data + 1, std::min(size - 1, sizeof(params)));
    return params;
  };
  if (size > 0 && data[0] % 2 == 1) return copy(flash4_bwd_params{});
  return copy(flash4_fwd_params{});
}

}  // namespace flash4::contract
