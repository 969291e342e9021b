#include "gpu/backward_case.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <sstream>
#include <utility>

#include "tolerance.hpp"

namespace flash4::test {
namespace {

constexpr std::size_t kGuardElements = 4096;        // poisoned elements on each side of every tensor
constexpr std::size_t kWorkspaceGuardBytes = 4096;  // poisoned bytes past the end of the workspace
constexpr std::uint16_t kPoison16 = 0xFFFF;         // a NaN in both bf16 and fp16
constexpr std::uint32_t kPoison32 = 0xFFFFFFFFu;    // a NaN in fp32
constexpr int kPoisonByte = 0xFF;
// Padding of strided views: 8 elements = 16 bytes, so that every stride stays a multiple of TMA's alignment;
// after a head's row, at least up to the widest kernel's head dim (BackwardCase::strided).
constexpr std::int64_t kPadElements = 8;
constexpr std::int64_t kWidestKernel = 256;
constexpr std::size_t kElementBytes = 2;

ref::Precision precision_of(flash4_dtype dtype) {
  return dtype == FLASH4_DTYPE_BF16 ? ref::Precision::bf16 : ref::Precision::fp16;
}

// Device memory that frees itself.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
    if (cudaMalloc(&ptr_, bytes) != cudaSuccess) ptr_ = nullptr;
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    std::swap(ptr_, other.ptr_);
    std::swap(bytes_, other.bytes_);
    return *this;
  }

  void* get() const { return ptr_; }
  std::size_t bytes() const { return bytes_; }

  template <class T>
  std::vector<T> download() const {
    std::vector<T> host(bytes_ / sizeof(T));
    cudaMemcpy(host.data(), ptr_, host.size() * sizeof(T), cudaMemcpyDeviceToHost);
    return host;
  }
  template <class T>
  void upload(const std::vector<T>& host) {
    cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

// A 16-bit (rows, heads, head_dim) tensor, rows being batch x seq (or the packed total of varlen), stored with
// `strides` in one buffer between guard regions. `image` is the whole buffer as it was last uploaded.
struct Tensor16 {
  const char* name = "";
  int rows = 0;
  int seqlen = 0;  // rows per batch; 0 for varlen, whose rows are packed and batch stride is unused
  int heads = 0;
  int head_dim = 0;
  flash4_strides strides{};
  DeviceBuffer buffer;
  std::vector<std::uint16_t> image;

  // Offset of element (row, head, 0) from the tensor's first element.
  std::size_t offset(int row, int head) const {
    const std::int64_t batch = seqlen > 0 ? row / seqlen : 0;
    const std::int64_t seq = seqlen > 0 ? row % seqlen : row;
    return static_cast<std::size_t>(batch * strides.batch + seq * strides.seq + head * strides.head);
  }
  std::size_t span() const { return rows == 0 ? 0 : offset(rows - 1, heads - 1) + head_dim; }
  void* data() const { return static_cast<std::uint16_t*>(buffer.get()) + kGuardElements; }
  std::size_t dense_index(int row, int head) const {
    return (static_cast<std::size_t>(row) * heads + head) * head_dim;
  }
  // Which elements of the buffer belong to the tensor.
  std::vector<bool> members() const {
    std::vector<bool> is_member(kGuardElements * 2 + span(), false);
    for (int r = 0; r < rows; ++r) {
      for (int h = 0; h < heads; ++h) {
        std::fill_n(is_member.begin() + static_cast<std::ptrdiff_t>(kGuardElements + offset(r, h)), head_dim, true);
      }
    }
    return is_member;
  }
};

Tensor16 make_tensor(const char* name, const BackwardCase& c, int rows, int seqlen, int heads, int head_dim) {
  Tensor16 t;
  t.name = name;
  t.rows = rows;
  t.seqlen = c.varlen_q.empty() ? seqlen : 0;
  t.heads = heads;
  t.head_dim = head_dim;
  const std::int64_t pad = c.strided ? kPadElements : 0;
  t.strides.head = c.strided ? std::max(head_dim + kPadElements, kWidestKernel) : head_dim;
  t.strides.seq = heads * t.strides.head + pad;
  t.strides.batch = std::max(1, seqlen) * t.strides.seq + pad;
  t.image.assign(kGuardElements * 2 + t.span(), kPoison16);
  t.buffer = DeviceBuffer(t.image.size() * kElementBytes);
  return t;
}

// Poisoned guards and padding around `values` (dense reference layout), uploaded.
void upload(Tensor16& t, ref::Precision precision, const std::vector<float>& values) {
  for (int r = 0; r < t.rows; ++r) {
    for (int h = 0; h < t.heads; ++h) {
      const std::size_t from = t.dense_index(r, h), to = kGuardElements + t.offset(r, h);
      for (int d = 0; d < t.head_dim; ++d) t.image[to + d] = ref::to_bits(precision, values[from + d]);
    }
  }
  t.buffer.upload(t.image);
}

std::vector<float> extract(const Tensor16& t, ref::Precision precision, const std::vector<std::uint16_t>& image) {
  std::vector<float> values(static_cast<std::size_t>(t.rows) * t.heads * t.head_dim);
  for (int r = 0; r < t.rows; ++r) {
    for (int h = 0; h < t.heads; ++h) {
      const std::size_t to = t.dense_index(r, h), from = kGuardElements + t.offset(r, h);
      for (int d = 0; d < t.head_dim; ++d) values[to + d] = ref::from_bits(precision, image[from + d]);
    }
  }
  return values;
}

// Every element outside the tensor (guards, padding) still holds the poison.
::testing::AssertionResult outside_poisoned(const Tensor16& t, const std::vector<std::uint16_t>& image) {
  const std::vector<bool> is_member = t.members();
  for (std::size_t e = 0; e < image.size(); ++e) {
    if (!is_member[e] && image[e] != kPoison16) {
      const bool guard = e < kGuardElements || e >= kGuardElements + t.span();
      return ::testing::AssertionFailure() << t.name << ": " << (guard ? "guard" : "padding") << " element "
                                           << e << " of the buffer was overwritten";
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult cuda_ok(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << cudaGetErrorString(error);
}

// The tolerance rule for one gradient, with the floor scaled to its magnitude (tests/tolerance.hpp).
::testing::AssertionResult gradient_within_tolerance(const char* what, const std::vector<float>& kernel,
                                                     const std::vector<float>& naive,
                                                     const std::vector<double>& exact, double floor) {
  return within_tolerance(what, compare(kernel, exact), compare(naive, exact), gradient_floor(exact, floor));
}

// Rows past seqused (flash4.h: left untouched) must still hold their poison, a NaN: o, lse and dq of unused
// query rows, dk and dv of unused key rows. They are then set to the reference's 0, so that the tolerance
// rule compares the used rows only.
::testing::AssertionResult take_unused_rows(const ref::Problem& p, std::vector<float>& o, std::vector<float>& lse,
                                            std::vector<float>& dq, std::vector<float>& dk, std::vector<float>& dv) {
  // `width` values of `values` from `first`: o and dv rows hold head_dim_v, dq and dk rows head_dim.
  const auto take = [](std::vector<float>& values, std::size_t first, int width, const char* name, int b, int row)
      -> ::testing::AssertionResult {
    for (std::size_t e = first; e < first + static_cast<std::size_t>(width); ++e) {
      if (!std::isnan(values[e])) {
        return ::testing::AssertionFailure() << name << " of unused row " << row << " of sequence " << b << " was written";
      }
      values[e] = 0.0f;
    }
    return ::testing::AssertionSuccess();
  };
  for (int b = 0; b < p.batch; ++b) {
    for (int i = p.seq_q(b); i < p.span_q(b); ++i) {
      for (int h = 0; h < p.heads_q; ++h) {
        if (auto r = take(o, p.o_index(b, i, h), p.dim_v(), "o", b, i); !r) return r;
        if (auto r = take(dq, p.q_index(b, i, h), p.head_dim, "dq", b, i); !r) return r;
        float& l = lse[p.lse_index(b, h, i)];
        if (!std::isnan(l)) return ::testing::AssertionFailure() << "lse of unused row " << i << " was written";
        l = 0.0f;
      }
    }
    for (int j = p.seq_k(b); j < p.span_k(b); ++j) {
      for (int h = 0; h < p.heads_kv; ++h) {
        if (auto r = take(dk, p.kv_index(b, j, h), p.head_dim, "dk", b, j); !r) return r;
        if (auto r = take(dv, p.v_index(b, j, h), p.dim_v(), "dv", b, j); !r) return r;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace

std::string BackwardCase::name() const {
  std::ostringstream s;
  s << (dtype == FLASH4_DTYPE_BF16 ? "bf16" : "fp16") << "_d" << head_dim;
  if (head_dim_v != 0) s << "_dv" << head_dim_v;
  if (varlen_q.empty()) {
    s << "_b" << batch << "_sq" << seqlen_q << "_sk" << seqlen_k;
  } else {  // the sequence lengths, e.g. _varlen_q100,0,300_k120,5,300
    s << "_varlen";
    for (const auto& [prefix, lengths] : {std::pair{"_q", &varlen_q}, std::pair{"_k", &varlen_k}}) {
      s << prefix;
      for (std::size_t b = 0; b < lengths->size(); ++b) s << (b ? "," : "") << (*lengths)[b];
    }
  }
  s << "_h" << heads_q << "x" << heads_kv << (causal ? "_causal" : "")
    << (window_left >= 0 || window_right >= 0 ? "_win" + std::to_string(window_left) + "," + std::to_string(window_right) : "")
    << (softcap > 0 ? "_softcap" : "") << (strided ? "_strided" : "")
    << (deterministic ? "_deterministic" : "") << (sink.empty() ? "" : "_sink");
  for (const auto& [prefix, used] : {std::pair{"_usedq", &seqused_q}, std::pair{"_usedk", &seqused_k}}) {
    if (used->empty()) continue;
    s << prefix;
    for (std::size_t b = 0; b < used->size(); ++b) s << (b ? "," : "") << (*used)[b];
  }
  return s.str();
}

ref::Problem BackwardCase::problem() const {
  ref::Problem p;
  p.batch = varlen_q.empty() ? batch : static_cast<int>(varlen_q.size());
  p.seqlen_q = seqlen_q;
  p.seqlen_k = seqlen_k;
  p.heads_q = heads_q;
  p.heads_kv = heads_kv;
  p.head_dim = head_dim;
  p.head_dim_v = head_dim_v;
  p.scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  p.causal = causal;
  p.window_left = window_left;
  p.window_right = window_right;
  p.softcap = softcap;
  if (!varlen_q.empty()) {
    p.cu_seqlens_q.assign(1, 0);
    p.cu_seqlens_k.assign(1, 0);
    for (std::size_t b = 0; b < varlen_q.size(); ++b) {
      p.cu_seqlens_q.push_back(p.cu_seqlens_q.back() + varlen_q[b]);
      p.cu_seqlens_k.push_back(p.cu_seqlens_k.back() + varlen_k[b]);
    }
  }
  p.sink = sink;
  p.seqused_q = seqused_q;
  p.seqused_k = seqused_k;
  return p;
}

struct BackwardDevice::State {
  BackwardCase c;
  ref::Problem problem;
  ref::Precision precision;
  Tensor16 q, k, v, o, dout, dq, dk, dv;
  std::size_t lse_count = 0;
  DeviceBuffer lse;
  DeviceBuffer cu_seqlens_q, cu_seqlens_k;
  DeviceBuffer sink, seqused_q, seqused_k;
  DeviceBuffer dsink;  // heads_q floats between poisoned guards
  DeviceBuffer workspace;  // workspace_bytes followed by kWorkspaceGuardBytes of poison
  std::size_t workspace_bytes = 0;
  std::vector<std::uint16_t> o_written;  // o's and lse's buffers as the forward left them
  std::vector<std::uint32_t> lse_written;

  float* lse_data() const { return static_cast<float*>(lse.get()) + kGuardElements; }
  float* dsink_data() const { return dsink.get() ? static_cast<float*>(dsink.get()) + kGuardElements : nullptr; }

  // The fields both params structs share.
  template <class Params>
  void fill_problem(Params& p) const {
    p.struct_size = sizeof(Params);
    p.dtype = c.dtype;
    p.q = q.data();
    p.k = k.data();
    p.v = v.data();
    p.q_strides = q.strides;
    p.k_strides = k.strides;
    p.v_strides = v.strides;
    p.o_strides = o.strides;
    p.batch = problem.batch;
    p.seqlen_q = c.seqlen_q;
    p.seqlen_k = c.seqlen_k;
    p.heads_q = c.heads_q;
    p.heads_kv = c.heads_kv;
    p.head_dim = c.head_dim;
    p.head_dim_v = c.head_dim_v;
    p.softmax_scale = static_cast<float>(problem.scale);
    p.causal = c.causal ? 1 : 0;
    p.window_left = c.window_left;
    p.window_right = c.window_right;
    p.softcap = c.softcap;
    if (problem.is_varlen()) {
      p.cu_seqlens_q = static_cast<const std::int32_t*>(cu_seqlens_q.get());
      p.cu_seqlens_k = static_cast<const std::int32_t*>(cu_seqlens_k.get());
      p.max_seqlen_q = std::max(1, *std::max_element(c.varlen_q.begin(), c.varlen_q.end()));
      p.max_seqlen_k = std::max(1, *std::max_element(c.varlen_k.begin(), c.varlen_k.end()));
      p.total_q = problem.rows_q();
      p.total_k = problem.rows_k();
    }
    p.sink = static_cast<const float*>(sink.get());
    p.seqused_q = static_cast<const std::int32_t*>(seqused_q.get());
    p.seqused_k = static_cast<const std::int32_t*>(seqused_k.get());
  }
};

BackwardDevice::BackwardDevice(const BackwardCase& c, const ref::Inputs& in) : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.c = c;
  s.problem = c.problem();
  s.precision = precision_of(c.dtype);
  const int rows_q = s.problem.rows_q(), rows_k = s.problem.rows_k();
  const int d = c.head_dim, dv = s.problem.dim_v();
  s.q = make_tensor("q", c, rows_q, c.seqlen_q, c.heads_q, d);
  s.k = make_tensor("k", c, rows_k, c.seqlen_k, c.heads_kv, d);
  s.v = make_tensor("v", c, rows_k, c.seqlen_k, c.heads_kv, dv);
  s.o = make_tensor("o", c, rows_q, c.seqlen_q, c.heads_q, dv);
  s.dout = make_tensor("dout", c, rows_q, c.seqlen_q, c.heads_q, dv);
  s.dq = make_tensor("dq", c, rows_q, c.seqlen_q, c.heads_q, d);
  s.dk = make_tensor("dk", c, rows_k, c.seqlen_k, c.heads_kv, d);
  s.dv = make_tensor("dv", c, rows_k, c.seqlen_k, c.heads_kv, dv);
  upload(s.q, s.precision, in.q);
  upload(s.k, s.precision, in.k);
  upload(s.v, s.precision, in.v);
  upload(s.dout, s.precision, in.dout);
  for (Tensor16* output : {&s.o, &s.dq, &s.dk, &s.dv}) output->buffer.upload(output->image);  // all poison
  s.lse_count = s.problem.lse_elements();
  s.lse = DeviceBuffer((s.lse_count + 2 * kGuardElements) * sizeof(float));
  cudaMemset(s.lse.get(), kPoisonByte, s.lse.bytes());
  if (s.problem.is_varlen()) {
    s.cu_seqlens_q = DeviceBuffer(s.problem.cu_seqlens_q.size() * sizeof(std::int32_t));
    s.cu_seqlens_k = DeviceBuffer(s.problem.cu_seqlens_k.size() * sizeof(std::int32_t));
    s.cu_seqlens_q.upload(s.problem.cu_seqlens_q);
    s.cu_seqlens_k.upload(s.problem.cu_seqlens_k);
  }
  if (!c.sink.empty()) {
    s.sink = DeviceBuffer(c.sink.size() * sizeof(float));
    s.sink.upload(c.sink);
    s.dsink = DeviceBuffer((c.sink.size() + 2 * kGuardElements) * sizeof(float));
  }
  for (const auto& [buffer, used] : {std::pair{&s.seqused_q, &c.seqused_q}, std::pair{&s.seqused_k, &c.seqused_k}}) {
    if (used->empty()) continue;
    *buffer = DeviceBuffer(used->size() * sizeof(std::int32_t));
    buffer->upload(*used);
  }
}

BackwardDevice::~BackwardDevice() = default;

::testing::AssertionResult BackwardDevice::forward() {
  State& s = *state_;
  flash4_fwd_params p{};
  s.fill_problem(p);
  p.o = s.o.data();
  p.lse = s.lse_data();
  std::size_t workspace_bytes = 0;
  if (const flash4_status sized = flash4_fwd_workspace_size(&p, &workspace_bytes); sized != FLASH4_SUCCESS) {
    return ::testing::AssertionFailure() << "flash4_fwd_workspace_size: " << flash4_last_error_message();
  }
  DeviceBuffer fwd_workspace(workspace_bytes);
  p.workspace = workspace_bytes > 0 ? fwd_workspace.get() : nullptr;
  p.workspace_bytes = workspace_bytes;
  const flash4_status status = flash4_fwd(&p, nullptr);
  if (status != FLASH4_SUCCESS) {
    return ::testing::AssertionFailure() << "flash4_fwd: " << flash4_status_string(status) << ": "
                                         << flash4_last_error_message();
  }
  if (auto synced = cuda_ok(cudaDeviceSynchronize(), "forward kernel"); !synced) return synced;
  s.o_written = s.o.buffer.download<std::uint16_t>();
  s.lse_written = s.lse.download<std::uint32_t>();
  return ::testing::AssertionSuccess();
}

flash4_bwd_params BackwardDevice::bwd_params() const {
  const State& s = *state_;
  flash4_bwd_params p{};
  s.fill_problem(p);
  p.deterministic = s.c.deterministic ? 1 : 0;
  p.o = s.o.data();
  p.dout = s.dout.data();
  p.lse = s.lse_data();
  p.dq = s.dq.data();
  p.dk = s.dk.data();
  p.dv = s.dv.data();
  p.dout_strides = s.dout.strides;
  p.dq_strides = s.dq.strides;
  p.dk_strides = s.dk.strides;
  p.dv_strides = s.dv.strides;
  p.dsink = s.dsink_data();
  return p;
}

flash4_status BackwardDevice::backward(std::optional<std::size_t> workspace_bytes) {
  State& s = *state_;
  flash4_bwd_params p = bwd_params();
  std::size_t needed = 0;
  if (const flash4_status status = flash4_bwd_workspace_size(&p, &needed); status != FLASH4_SUCCESS) return status;
  s.workspace_bytes = workspace_bytes.value_or(needed);
  if (s.workspace.bytes() < s.workspace_bytes + kWorkspaceGuardBytes) {
    s.workspace = DeviceBuffer(s.workspace_bytes + kWorkspaceGuardBytes);
  }
  // A poisoned workspace: the contract does not promise zeros, so the kernel must not rely on them.
  cudaMemset(s.workspace.get(), kPoisonByte, s.workspace.bytes());
  for (const Tensor16* gradient : {&s.dq, &s.dk, &s.dv}) {
    cudaMemset(gradient->buffer.get(), kPoisonByte, gradient->buffer.bytes());
  }
  if (s.dsink.get() != nullptr) cudaMemset(s.dsink.get(), kPoisonByte, s.dsink.bytes());
  p.workspace = s.workspace_bytes > 0 ? s.workspace.get() : nullptr;
  p.workspace_bytes = s.workspace_bytes;
  return flash4_bwd(&p, nullptr);
}

std::vector<float> BackwardDevice::o() const {
  return extract(state_->o, state_->precision, state_->o.buffer.download<std::uint16_t>());
}
std::vector<float> BackwardDevice::dq() const {
  return extract(state_->dq, state_->precision, state_->dq.buffer.download<std::uint16_t>());
}
std::vector<float> BackwardDevice::dk() const {
  return extract(state_->dk, state_->precision, state_->dk.buffer.download<std::uint16_t>());
}
std::vector<float> BackwardDevice::dv() const {
  return extract(state_->dv, state_->precision, state_->dv.buffer.download<std::uint16_t>());
}

std::vector<float> BackwardDevice::dsink() const {
  if (state_->dsink.get() == nullptr) return {};
  const std::vector<float> all = state_->dsink.download<float>();
  const auto first = all.begin() + static_cast<std::ptrdiff_t>(kGuardElements);
  return {first, first + static_cast<std::ptrdiff_t>(state_->c.sink.size())};
}

std::vector<float> BackwardDevice::lse() const {
  const std::vector<float> all = state_->lse.download<float>();
  const auto first = all.begin() + static_cast<std::ptrdiff_t>(kGuardElements);
  return {first, first + static_cast<std::ptrdiff_t>(state_->lse_count)};
}

std::vector<std::uint16_t> BackwardDevice::gradient_bits() const {
  std::vector<std::uint16_t> bits;
  for (const Tensor16* gradient : {&state_->dq, &state_->dk, &state_->dv}) {
    const std::vector<std::uint16_t> image = gradient->buffer.download<std::uint16_t>();
    bits.insert(bits.end(), image.begin(), image.end());
  }
  if (state_->dsink.get() != nullptr) {
    const std::vector<std::uint16_t> image = state_->dsink.download<std::uint16_t>();
    bits.insert(bits.end(), image.begin(), image.end());
  }
  return bits;
}

::testing::AssertionResult BackwardDevice::untouched() const {
  const State& s = *state_;
  for (const Tensor16* input : {&s.q, &s.k, &s.v, &s.dout}) {
    if (input->buffer.download<std::uint16_t>() != input->image) {
      return ::testing::AssertionFailure() << "input " << input->name << " (or its guards) changed";
    }
  }
  const std::vector<std::uint16_t> o_now = s.o.buffer.download<std::uint16_t>();
  if (!s.o_written.empty() && o_now != s.o_written) {
    return ::testing::AssertionFailure() << "o changed after the forward wrote it";
  }
  if (auto poisoned = outside_poisoned(s.o, o_now); !poisoned) return poisoned;
  const std::vector<std::uint32_t> lse_now = s.lse.download<std::uint32_t>();
  if (!s.lse_written.empty() && lse_now != s.lse_written) {
    return ::testing::AssertionFailure() << "lse changed after the forward wrote it";
  }
  for (std::size_t e = 0; e < kGuardElements; ++e) {
    if (lse_now[e] != kPoison32 || lse_now[kGuardElements + s.lse_count + e] != kPoison32) {
      return ::testing::AssertionFailure() << "lse guard element " << e << " was overwritten";
    }
  }
  for (const Tensor16* gradient : {&s.dq, &s.dk, &s.dv}) {
    if (auto poisoned = outside_poisoned(*gradient, gradient->buffer.download<std::uint16_t>()); !poisoned) {
      return poisoned;
    }
  }
  if (s.dsink.get() != nullptr) {
    const std::vector<std::uint32_t> dsink_now = s.dsink.download<std::uint32_t>();
    for (std::size_t e = 0; e < kGuardElements; ++e) {
      if (dsink_now[e] != kPoison32 || dsink_now[kGuardElements + s.c.sink.size() + e] != kPoison32) {
        return ::testing::AssertionFailure() << "dsink guard element " << e << " was overwritten";
      }
    }
  }
  const std::vector<std::uint8_t> workspace = s.workspace.download<std::uint8_t>();
  for (std::size_t e = s.workspace_bytes; e < workspace.size(); ++e) {
    if (workspace[e] != kPoisonByte) {
      return ::testing::AssertionFailure() << "byte " << e - s.workspace_bytes << " past the end of the "
                                           << s.workspace_bytes << "-byte workspace was overwritten";
    }
  }
  return ::testing::AssertionSuccess();
}

BackwardOutcome run_backward_case(const BackwardCase& c) {
  BackwardOutcome outcome;
  const ref::Problem problem = c.problem();
  const ref::Precision precision = precision_of(c.dtype);
  outcome.seed = ref::fresh_seed();
  const ref::Inputs in = ref::random_inputs(problem, precision, outcome.seed);

  // The GPU first: a build without the backward skips before the CPU reference is paid for.
  BackwardDevice device(c, in);
  if (outcome.calls = device.forward(); !outcome.calls) return outcome;
  const flash4_status status = device.backward();
  if (status == FLASH4_ERROR_NOT_IMPLEMENTED || status == FLASH4_ERROR_NO_KERNEL) {
    outcome.unavailable = std::string(flash4_status_string(status)) + ": " + flash4_last_error_message();
    return outcome;
  }
  if (status != FLASH4_SUCCESS) {
    outcome.calls = ::testing::AssertionFailure() << "flash4_bwd: " << flash4_status_string(status) << ": "
                                                  << flash4_last_error_message();
    return outcome;
  }
  if (outcome.calls = cuda_ok(cudaDeviceSynchronize(), "backward kernel"); !outcome.calls) return outcome;

  const double floor = c.dtype == FLASH4_DTYPE_BF16 ? kBf16NoiseFloor : kFp16NoiseFloor;
  std::vector<float> o = device.o(), lse = device.lse(), dq = device.dq(), dk = device.dk(), dv = device.dv();
  outcome.unused_rows = take_unused_rows(problem, o, lse, dq, dk, dv);
  {
    const ref::ForwardResult64 exact = ref::forward_fp64(problem, in.q, in.k, in.v);
    const ref::ForwardResult32 naive = ref::forward_naive(problem, precision, in.q, in.k, in.v);
    outcome.o = within_tolerance("O", compare(o, exact.o), compare(naive.o, exact.o), floor);
    outcome.lse = within_tolerance("LSE", compare(lse, exact.lse), compare(naive.lse, exact.lse), floor);
  }
  const ref::BackwardResult64 exact = ref::backward_fp64(problem, in.q, in.k, in.v, in.dout);
  // The baseline takes delta from the O the kernel's backward was given (ref::backward_naive).
  const ref::BackwardResult32 naive = ref::backward_naive(problem, precision, in.q, in.k, in.v, in.dout, o);
  outcome.dq = gradient_within_tolerance("dQ", dq, naive.dq, exact.dq, floor);
  outcome.dk = gradient_within_tolerance("dK", dk, naive.dk, exact.dk, floor);
  outcome.dv = gradient_within_tolerance("dV", dv, naive.dv, exact.dv, floor);
  outcome.dsink = gradient_within_tolerance("dsink", device.dsink(), naive.dsink, exact.dsink, floor);
  outcome.untouched = device.untouched();
  return outcome;
}

void expect_matches_reference(const BackwardOutcome& outcome) {
  SCOPED_TRACE("seed " + std::to_string(outcome.seed));
  ASSERT_TRUE(outcome.calls);
  ASSERT_TRUE(outcome.unavailable.empty()) << "a built backward kernel refused the case: " << outcome.unavailable;
  EXPECT_TRUE(outcome.o);
  EXPECT_TRUE(outcome.lse);
  EXPECT_TRUE(outcome.dq);
  EXPECT_TRUE(outcome.dk);
  EXPECT_TRUE(outcome.dv);
  EXPECT_TRUE(outcome.untouched);
}

std::string test_name(const BackwardCase& c, std::size_t index) {
  std::string name = c.name();
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name + "_" + std::to_string(index);
}

}  // namespace flash4::test
