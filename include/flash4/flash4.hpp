// flash4 C++ API: TensorViews, options and RAII workspace over the C ABI (flash4.h).
//
// Everything here is inline and fills the same flash4_fwd_params / flash4_bwd_params a C caller would, so the
// library's validation and launch path is shared. Only cuda_stream_allocator() lives in the library (it needs
// the CUDA runtime, which this header does not include). Errors come back as a Status whose message names the
// tensor or argument; nothing throws except Result::value() on an error (std::bad_variant_access).
//
//   flash4::Workspace workspace;  // cudaMallocAsync on the call's stream; or Workspace(my_allocator)
//   auto q = flash4::TensorView::contiguous(q_ptr, flash4::DType::bf16, {B, Sq, Hq, D});
//   ...
//   flash4::Status s = flash4::forward(q, k, v, o, lse, {.causal = true}, stream, workspace);
//   if (!s.ok()) std::cerr << s.to_string() << "\n";
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include "flash4/flash4.h"

namespace flash4 {

enum class DType : int { bf16 = FLASH4_DTYPE_BF16, fp16 = FLASH4_DTYPE_FP16 };

constexpr const char* to_string(DType dtype) { return dtype == DType::bf16 ? "bf16" : "fp16"; }

// The outcome of a call: a flash4_status and, on failure, the message naming the argument.
class Status {
 public:
  Status() = default;  // success
  Status(flash4_status code, std::string message) : code_(code), message_(std::move(message)) {}

  // The status of a C ABI call, with this thread's last error message when it failed.
  static Status from_c(flash4_status code) {
    return code == FLASH4_SUCCESS ? Status{} : Status{code, flash4_last_error_message()};
  }

  bool ok() const { return code_ == FLASH4_SUCCESS; }
  flash4_status code() const { return code_; }
  const std::string& message() const { return message_; }
  // "FLASH4_ERROR_X: message", or "FLASH4_SUCCESS".
  std::string to_string() const {
    return ok() ? flash4_status_string(code_) : std::string(flash4_status_string(code_)) + ": " + message_;
  }

 private:
  flash4_status code_ = FLASH4_SUCCESS;
  std::string message_;
};

// A value or the Status that explains its absence (C++20 has no std::expected).
template <class T>
class Result {
 public:
  Result(T value) : state_(std::move(value)) {}
  // An error; a success Status carries no value, so it is turned into an INTERNAL error instead of a Result
  // that claims success and holds nothing.
  Result(Status error)
      : state_(error.ok() ? Status{FLASH4_ERROR_INTERNAL, "Result made from a success Status without a value"}
                          : std::move(error)) {}

  bool ok() const { return std::holds_alternative<T>(state_); }
  // The value; throws std::bad_variant_access when !ok().
  const T& value() const& { return std::get<T>(state_); }
  T& value() & { return std::get<T>(state_); }
  T&& value() && { return std::get<T>(std::move(state_)); }
  // Success when ok(), else the error.
  Status status() const { return ok() ? Status{} : std::get<Status>(state_); }

 private:
  std::variant<T, Status> state_;
};

// A strided 4-D view of device memory; sizes and strides in elements, the last dimension contiguous.
//   fixed length: (batch, seq, heads, head_dim), e.g. q (B, Sq, Hq, D); v, o, dout, dv have v's head dim
//   varlen:       the packed (total, heads, head_dim) tensor as (1, total, heads, head_dim); stride[0] is unused
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::bf16;
  std::array<std::int64_t, 4> shape{};
  std::array<std::int64_t, 4> stride{};

  // A row-major (contiguous) view.
  static TensorView contiguous(void* data, DType dtype, std::array<std::int64_t, 4> shape) {
    return TensorView{data, dtype, shape, {shape[1] * shape[2] * shape[3], shape[2] * shape[3], shape[3], 1}};
  }
  // A contiguous packed varlen tensor (total, heads, head_dim).
  static TensorView packed(void* data, DType dtype, std::int64_t total, std::int64_t heads,
                           std::int64_t head_dim) {
    return contiguous(data, dtype, {1, total, heads, head_dim});
  }
};

struct AttnOptions {
  std::optional<float> softmax_scale = std::nullopt;  // default 1/sqrt(head_dim)
  bool causal = false;                                // bottom-right aligned; the same as window_right = 0
  int window_left = -1;                               // -1: unbounded
  int window_right = -1;                              // -1: unbounded
  float softcap = 0;                                  // 0: off
  bool deterministic = false;                         // backward only: bit-identical gradients across runs
  // Device memory (flash4.h describes both): heads_q fp32 learnable sink logits (the backward then needs
  // BackwardTensors::dsink), and batch int32 counts of the rows each sequence uses (fixed length or varlen).
  const float* sink = nullptr;
  const std::int32_t* seqused_q = nullptr;
  const std::int32_t* seqused_k = nullptr;
};

// Variable-length batches: q/o (and the gradients) are packed views (1, total, heads, head_dim) and
// sequence b spans rows [cu_seqlens[b], cu_seqlens[b+1]).
struct VarlenArgs {
  const std::int32_t* cu_seqlens_q = nullptr;  // device memory, batch + 1 offsets
  const std::int32_t* cu_seqlens_k = nullptr;
  std::int32_t batch = 0;         // number of sequences
  std::int32_t max_seqlen_q = 0;  // a bound on every query sequence's length (sizes the grid)
  std::int32_t max_seqlen_k = 0;
};

// A paged K/V cache for the forward (FlashAttention's block_table): k and v are views (num_pages, page_size,
// heads_kv, head_dim) of the cache, and key t of sequence b lives in page
// block_table[b * block_table_stride + t / page_size], row t % page_size (flash4.h has the rules). The key
// counts cannot come from k's shape, so they are given here.
struct PagedKvArgs {
  const std::int32_t* block_table = nullptr;  // device memory, int32, batch rows
  std::int64_t block_table_stride = 0;        // entries between consecutive sequences' rows
  std::int32_t seqlen_k = 0;                  // fixed length: every sequence's keys
  std::int32_t total_k = 0;                   // varlen: the sum of the key lengths, cu_seqlens_k[batch]
};

// How a Workspace gets device memory: plain function pointers, so that any pool (PyTorch's caching allocator,
// an arena) can serve it without this header knowing its type.
struct Allocator {
  // Returns `bytes` of device memory usable by work on `stream`, or nullptr on failure. The forward and
  // the backward need it 256-byte aligned (cudaMalloc's alignment; FLASH4_ERROR_MISALIGNED otherwise).
  void* (*allocate)(void* context, std::size_t bytes, flash4_stream_t stream) = nullptr;
  // Gives back memory from allocate, once the work already queued on `stream` is done with it.
  void (*deallocate)(void* context, void* pointer, std::size_t bytes, flash4_stream_t stream) = nullptr;
  void* context = nullptr;
};

// cudaMallocAsync / cudaFreeAsync on the stream passed (stream-ordered: never synchronizes). In the library.
FLASH4_API Allocator cuda_stream_allocator();

// Device scratch memory for flash4 calls, owned RAII. It grows on demand and never shrinks. It serves one
// stream at a time: used on another stream, it frees its buffer on the old stream and allocates a new one on
// the new stream, so work still queued on the old stream never shares it. Destroy it before the last stream
// it was used on (its destructor frees on that stream).
class Workspace {
 public:
  Workspace() : Workspace(cuda_stream_allocator()) {}
  explicit Workspace(Allocator allocator) : allocator_(allocator) {}
  ~Workspace() { release(); }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  Workspace(Workspace&& other) noexcept { *this = std::move(other); }
  Workspace& operator=(Workspace&& other) noexcept {
    if (this != &other) {
      release();
      allocator_ = other.allocator_;
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
      stream_ = other.stream_;
    }
    return *this;
  }

  // Makes at least `bytes` available to work on `stream`.
  Status reserve(std::size_t bytes, flash4_stream_t stream) {
    if (bytes <= size_ && (stream == stream_ || data_ == nullptr)) return {};
    if (allocator_.allocate == nullptr || allocator_.deallocate == nullptr) {
      return {FLASH4_ERROR_INVALID_ARGUMENT, "workspace: the Allocator's allocate or deallocate is NULL"};
    }
    const std::size_t wanted = bytes > size_ ? bytes : size_;
    release();
    if (wanted == 0) return {};
    data_ = allocator_.allocate(allocator_.context, wanted, stream);
    if (data_ == nullptr) {
      return {FLASH4_ERROR_CUDA,
              "workspace: the allocator could not provide " + std::to_string(wanted) + " bytes"};
    }
    size_ = wanted;
    stream_ = stream;
    return {};
  }

  void* data() const { return data_; }
  std::size_t size() const { return size_; }

 private:
  void release() {
    if (data_ != nullptr) allocator_.deallocate(allocator_.context, data_, size_, stream_);
    data_ = nullptr;
    size_ = 0;
  }

  Allocator allocator_;
  void* data_ = nullptr;
  std::size_t size_ = 0;
  flash4_stream_t stream_ = nullptr;
};

// The tensors of a backward call; lse is the one flash4 forward wrote.
struct BackwardTensors {
  TensorView q, k, v, o, dout;
  const float* lse = nullptr;
  TensorView dq, dk, dv;
  float* dsink = nullptr;  // heads_q fp32: the sinks' gradient, required with AttnOptions::sink
};

namespace detail {

inline constexpr const char* kDimNames[4] = {"batch", "seq", "heads", "head_dim"};

struct NamedView {
  const char* name;
  const TensorView* view;
};

// One view on its own: sizes in int32 range, contiguous last dimension, the problem's dtype, and a batch of
// one when packed (varlen).
inline Status check_view(NamedView t, DType dtype, bool varlen) {
  const TensorView& v = *t.view;
  for (int d = 0; d < 4; ++d) {
    const std::string where = std::string(t.name) + ".shape[" + std::to_string(d) + "] (" + kDimNames[d] +
                              ") is " + std::to_string(v.shape[d]);
    if (v.shape[d] < 0) return {FLASH4_ERROR_INVALID_SIZE, where + "; sizes must be >= 0"};
    if (v.shape[d] > std::numeric_limits<std::int32_t>::max()) {
      return {FLASH4_ERROR_SIZE_OVERFLOW, where + "; sizes must fit in int32"};
    }
  }
  if (v.stride[3] != 1) {
    return {FLASH4_ERROR_INVALID_ARGUMENT, std::string(t.name) + ".stride[3] is " + std::to_string(v.stride[3]) +
                                               "; the head_dim dimension must be contiguous (stride 1)"};
  }
  if (v.dtype != dtype) {
    return {FLASH4_ERROR_UNSUPPORTED_DTYPE, std::string(t.name) + ".dtype is " + to_string(v.dtype) +
                                                " but q.dtype is " + to_string(dtype) +
                                                "; all tensors share one dtype"};
  }
  if (varlen && v.shape[0] != 1) {
    return {FLASH4_ERROR_INVALID_VARLEN, std::string(t.name) + ".shape[0] is " + std::to_string(v.shape[0]) +
                                             "; varlen views are packed: (1, total, heads, head_dim)"};
  }
  return {};
}

// `t` must have the shape of `like` in the dimensions `dims` (a bit mask over batch, seq, heads, head_dim).
inline Status check_same(NamedView t, NamedView like, unsigned dims) {
  for (int d = 0; d < 4; ++d) {
    if ((dims >> d & 1u) && t.view->shape[d] != like.view->shape[d]) {
      return {FLASH4_ERROR_INVALID_SIZE, std::string(t.name) + ".shape[" + std::to_string(d) + "] (" +
                                             kDimNames[d] + ") is " + std::to_string(t.view->shape[d]) + " but " +
                                             like.name + ".shape[" + std::to_string(d) + "] is " +
                                             std::to_string(like.view->shape[d])};
    }
  }
  return {};
}

inline constexpr unsigned kAllDims = 0b1111;
inline constexpr unsigned kBatchAndHeadDim = 0b1001;  // what k shares with q (seq and heads may differ)
inline constexpr unsigned kRowDims = 0b0111;          // batch, seq, heads: what v shares with k, o with q
inline constexpr unsigned kHeadDimOnly = 0b1000;      // also what a paged cache shares with q

// The views of one call, by the shape they must have: q's (dq), k's (dk), v's (dv), and o's (o, dout): q's
// rows and heads with v's head dim. k shares q's batch and head_dim; v shares k's batch, seq and heads and
// has a head dim of its own (head_dim_v).
struct ViewGroups {
  std::initializer_list<NamedView> q_like, k_like, v_like, o_like;
};

inline Status check_views(NamedView q, NamedView k, NamedView v, ViewGroups groups, bool varlen) {
  const DType dtype = q.view->dtype;
  for (NamedView t : {q, k, v}) {
    if (Status s = check_view(t, dtype, varlen); !s.ok()) return s;
  }
  if (Status s = check_same(k, q, kBatchAndHeadDim); !s.ok()) return s;
  if (Status s = check_same(v, k, kRowDims); !s.ok()) return s;
  for (const auto& [group, like] :
       {std::pair{groups.q_like, q}, std::pair{groups.k_like, k}, std::pair{groups.v_like, v}}) {
    for (NamedView t : group) {
      if (Status s = check_view(t, dtype, varlen); !s.ok()) return s;
      if (Status s = check_same(t, like, kAllDims); !s.ok()) return s;
    }
  }
  for (NamedView t : groups.o_like) {
    if (Status s = check_view(t, dtype, varlen); !s.ok()) return s;
    if (Status s = check_same(t, q, kRowDims); !s.ok()) return s;
    if (Status s = check_same(t, v, kHeadDimOnly); !s.ok()) return s;
  }
  return {};
}

// A paged forward's views: q and o as without paging; k a (num_pages, page_size, heads_kv, head_dim) cache
// with q's dtype and head_dim, v the shape of k but for its head dim, which o shares.
inline Status check_paged_views(NamedView q, NamedView k, NamedView o, NamedView v, bool varlen) {
  const DType dtype = q.view->dtype;
  for (NamedView t : {q, o}) {
    if (Status s = check_view(t, dtype, varlen); !s.ok()) return s;
  }
  if (Status s = check_same(o, q, kRowDims); !s.ok()) return s;
  for (NamedView t : {k, v}) {
    if (Status s = check_view(t, dtype, false); !s.ok()) return s;
  }
  if (Status s = check_same(k, q, kHeadDimOnly); !s.ok()) return s;
  if (Status s = check_same(v, k, kRowDims); !s.ok()) return s;
  return check_same(o, v, kHeadDimOnly);
}

inline flash4_strides strides_of(const TensorView& v) { return {v.stride[0], v.stride[1], v.stride[2]}; }

// The size, dtype, mask and varlen fields both params structs share.
template <class Params>
void fill_problem(Params& p, const TensorView& q, const TensorView& k, const TensorView& v,
                  const AttnOptions& options, const VarlenArgs* varlen) {
  p.struct_size = sizeof(Params);
  p.dtype = static_cast<flash4_dtype>(q.dtype);
  p.heads_q = static_cast<std::int32_t>(q.shape[2]);
  p.heads_kv = static_cast<std::int32_t>(k.shape[2]);
  p.head_dim = static_cast<std::int32_t>(q.shape[3]);
  p.head_dim_v = static_cast<std::int32_t>(v.shape[3]);
  p.softmax_scale = options.softmax_scale.value_or(1.0f / std::sqrt(static_cast<float>(q.shape[3])));
  p.causal = options.causal ? 1 : 0;
  p.window_left = options.window_left;
  p.window_right = options.window_right;
  p.softcap = options.softcap;
  p.sink = options.sink;
  p.seqused_q = options.seqused_q;
  p.seqused_k = options.seqused_k;
  if (varlen == nullptr) {
    p.batch = static_cast<std::int32_t>(q.shape[0]);
    p.seqlen_q = static_cast<std::int32_t>(q.shape[1]);
    p.seqlen_k = static_cast<std::int32_t>(k.shape[1]);
    return;
  }
  // Varlen: seqlen_q / seqlen_k are ignored by the library and left 0.
  p.batch = varlen->batch;
  p.cu_seqlens_q = varlen->cu_seqlens_q;
  p.cu_seqlens_k = varlen->cu_seqlens_k;
  p.max_seqlen_q = varlen->max_seqlen_q;
  p.max_seqlen_k = varlen->max_seqlen_k;
  p.total_q = static_cast<std::int32_t>(q.shape[1]);
  p.total_k = static_cast<std::int32_t>(k.shape[1]);
}

}  // namespace detail

// The C params for a forward call, after checking that the views agree with each other (an error names the
// tensor). lse (optional) is fp32 (B, Hq, Sq) contiguous, or (Hq, total_q) for varlen. With `paged`, k and v
// are the pages of a paged cache (PagedKvArgs). The workspace fields are left empty; the library's own
// validation (flash4_fwd_check) runs when the params are used.
inline Result<flash4_fwd_params> make_fwd_params(const TensorView& q, const TensorView& k, const TensorView& v,
                                                 const TensorView& o, float* lse, const AttnOptions& options,
                                                 const VarlenArgs* varlen = nullptr,
                                                 const PagedKvArgs* paged = nullptr) {
  const Status views =
      paged == nullptr
          ? detail::check_views({"q", &q}, {"k", &k}, {"v", &v}, {{}, {}, {}, {{"o", &o}}}, varlen != nullptr)
          : detail::check_paged_views({"q", &q}, {"k", &k}, {"o", &o}, {"v", &v}, varlen != nullptr);
  if (!views.ok()) return views;
  flash4_fwd_params p{};
  detail::fill_problem(p, q, k, v, options, varlen);
  if (paged != nullptr) {
    p.block_table = paged->block_table;
    p.block_table_stride = paged->block_table_stride;
    p.page_size = static_cast<std::int32_t>(k.shape[1]);
    p.num_pages = static_cast<std::int32_t>(k.shape[0]);
    if (varlen == nullptr) p.seqlen_k = paged->seqlen_k;
    else p.total_k = paged->total_k;
  }
  p.q = q.data;
  p.k = k.data;
  p.v = v.data;
  p.o = o.data;
  p.lse = lse;
  p.q_strides = detail::strides_of(q);
  p.k_strides = detail::strides_of(k);
  p.v_strides = detail::strides_of(v);
  p.o_strides = detail::strides_of(o);
  return p;
}

// The C params for a backward call; as make_fwd_params, plus options.deterministic.
inline Result<flash4_bwd_params> make_bwd_params(const BackwardTensors& t, const AttnOptions& options,
                                                 const VarlenArgs* varlen = nullptr) {
  if (Status s = detail::check_views({"q", &t.q}, {"k", &t.k}, {"v", &t.v},
                                     {{{"dq", &t.dq}}, {{"dk", &t.dk}}, {{"dv", &t.dv}},
                                      {{"o", &t.o}, {"dout", &t.dout}}},
                                     varlen != nullptr);
      !s.ok()) {
    return s;
  }
  flash4_bwd_params p{};
  detail::fill_problem(p, t.q, t.k, t.v, options, varlen);
  p.deterministic = options.deterministic ? 1 : 0;
  p.q = t.q.data;
  p.k = t.k.data;
  p.v = t.v.data;
  p.o = t.o.data;
  p.dout = t.dout.data;
  p.lse = t.lse;
  p.dq = t.dq.data;
  p.dk = t.dk.data;
  p.dv = t.dv.data;
  p.dsink = t.dsink;
  p.q_strides = detail::strides_of(t.q);
  p.k_strides = detail::strides_of(t.k);
  p.v_strides = detail::strides_of(t.v);
  p.o_strides = detail::strides_of(t.o);
  p.dout_strides = detail::strides_of(t.dout);
  p.dq_strides = detail::strides_of(t.dq);
  p.dk_strides = detail::strides_of(t.dk);
  p.dv_strides = detail::strides_of(t.dv);
  return p;
}

namespace detail {

// Sizes the workspace for `params`, points them at it and launches on `stream`.
template <class Params>
Status run(Result<Params> made, flash4_stream_t stream, Workspace& workspace,
           flash4_status (*workspace_size)(const Params*, std::size_t*),
           flash4_status (*launch)(const Params*, flash4_stream_t)) {
  if (!made.ok()) return made.status();
  Params& params = made.value();
  std::size_t bytes = 0;
  if (Status s = Status::from_c(workspace_size(&params, &bytes)); !s.ok()) return s;
  if (Status s = workspace.reserve(bytes, stream); !s.ok()) return s;
  params.workspace = workspace.data();
  params.workspace_bytes = workspace.size();
  return Status::from_c(launch(&params, stream));
}

}  // namespace detail

// Enqueues the forward on `stream` (asynchronous); o (and lse when not null) are written.
inline Status forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
                      float* lse, const AttnOptions& options, flash4_stream_t stream, Workspace& workspace,
                      const VarlenArgs* varlen = nullptr, const PagedKvArgs* paged = nullptr) {
  return detail::run(make_fwd_params(q, k, v, o, lse, options, varlen, paged), stream, workspace,
                     flash4_fwd_workspace_size, flash4_fwd);
}

// Enqueues the backward on `stream` (asynchronous); dq, dk and dv (and dsink with sinks) are written.
inline Status backward(const BackwardTensors& tensors, const AttnOptions& options, flash4_stream_t stream,
                       Workspace& workspace, const VarlenArgs* varlen = nullptr) {
  return detail::run(make_bwd_params(tensors, options, varlen), stream, workspace, flash4_bwd_workspace_size,
                     flash4_bwd);
}

}  // namespace flash4

// Attention against a KV cache (decoding): KvcacheTensors, make_kvcache_params, kvcache.
#include "flash4/flash4_kvcache.hpp"
