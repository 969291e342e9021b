// flash4-bench on a device: median time over per-launch CUDA event pairs, TFLOPS, GB/s of compulsory traffic
// and, with --verify, sampled-row errors against the fp64 CPU reference. The backward's timed launches are
// flash4_bwd alone: the forward runs once before them, for the O and LSE the backward reads.
//
// Inputs are unit-normal values made on the host (this file is host code: no device fill kernels) once, for the
// largest case, and every case reads a prefix of them. The anchors' cases hold 16K tokens x 2048 wide = 64 MB per
// tensor, more than the H200's 60 MB L2, so the timed launches read q, k and v from DRAM.
#include "device_run.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cases.hpp"
#include "cuda_util.hpp"
#include "reference/reference.hpp"
#include "report.hpp"
#include "verify.hpp"

namespace flash4::bench {
namespace {

constexpr std::size_t kElementBytes = 2;
// cudaMemset pattern that makes every bf16 / fp16 element a NaN and every fp32 LSE a NaN: an output the kernel
// fails to write cannot pass --verify by accident.
constexpr int kPoisonByte = 0xFF;

std::size_t q_elements(const Case& c) { return c.rows_q() * c.heads_q * c.head_dim; }
std::size_t kv_elements(const Case& c) { return c.rows_k() * c.heads_kv * c.head_dim; }
std::size_t lse_elements(const Case& c) { return c.rows_q() * c.heads_q; }

// Host inputs (rounded to the dtype, as floats for the reference) and their device copies, sized for the largest
// case; outputs too. Gradient buffers only for the backward.
struct Tensors {
  std::vector<float> q, k, v, dout;
  DeviceBuffer d_q, d_k, d_v, d_o, d_lse, d_dout, d_dq, d_dk, d_dv;
};

DeviceBuffer upload(std::span<const float> values, ref::Precision dtype) {
  std::vector<std::uint16_t> bits(values.size());
  std::transform(values.begin(), values.end(), bits.begin(), [dtype](float x) { return ref::to_bits(dtype, x); });
  DeviceBuffer buffer(bits.size() * kElementBytes);
  check_cuda(cudaMemcpy(buffer.get(), bits.data(), buffer.bytes(), cudaMemcpyHostToDevice), "cudaMemcpy q/k/v");
  return buffer;
}

Tensors make_tensors(const std::vector<Case>& list, const Options& options) {
  std::size_t max_q = 0, max_kv = 0, max_lse = 0;
  for (const Case& c : list) {
    max_q = std::max(max_q, q_elements(c));
    max_kv = std::max(max_kv, kv_elements(c));
    max_lse = std::max(max_lse, lse_elements(c));
  }
  Tensors t;
  const std::uint64_t seed = ref::fresh_seed();
  t.q = ref::random_tensor(max_q, options.dtype, seed);
  t.k = ref::random_tensor(max_kv, options.dtype, seed + 1);
  t.v = ref::random_tensor(max_kv, options.dtype, seed + 2);
  t.d_q = upload(t.q, options.dtype);
  t.d_k = upload(t.k, options.dtype);
  t.d_v = upload(t.v, options.dtype);
  t.d_o = DeviceBuffer(max_q * kElementBytes);
  t.d_lse = DeviceBuffer(max_lse * sizeof(float));
  const bool backward = std::any_of(list.begin(), list.end(), [](const Case& c) { return c.mode == Mode::bwd; });
  if (backward) {
    t.dout = ref::random_tensor(max_q, options.dtype, seed + 3);
    t.d_dout = upload(t.dout, options.dtype);
    t.d_dq = DeviceBuffer(max_q * kElementBytes);
    t.d_dk = DeviceBuffer(max_kv * kElementBytes);
    t.d_dv = DeviceBuffer(max_kv * kElementBytes);
  }
  return t;
}

// The cu_seqlens offsets of a varlen case on the device, and the VarlenArgs that point at them.
class DeviceVarlen {
 public:
  explicit DeviceVarlen(const Case& c) {
    const ref::Problem problem = to_problem(c);
    q_ = upload_offsets(problem.cu_seqlens_q);
    k_ = upload_offsets(problem.cu_seqlens_k);
    args_ = {.cu_seqlens_q = static_cast<const std::int32_t*>(q_.get()),
             .cu_seqlens_k = static_cast<const std::int32_t*>(k_.get()),
             .batch = c.batch,
             .max_seqlen_q = c.seqlen_q,
             .max_seqlen_k = c.seqlen_k};
  }
  const VarlenArgs* args() const { return &args_; }

 private:
  static DeviceBuffer upload_offsets(const std::vector<int>& offsets) {
    const std::vector<std::int32_t> values(offsets.begin(), offsets.end());
    DeviceBuffer buffer(values.size() * sizeof(std::int32_t));
    check_cuda(cudaMemcpy(buffer.get(), values.data(), buffer.bytes(), cudaMemcpyHostToDevice), "cudaMemcpy cu_seqlens");
    return buffer;
  }
  DeviceBuffer q_, k_;
  VarlenArgs args_;
};

// One case's calls: the forward, and the backward over the forward's output.
class Launcher {
 public:
  Launcher(const Case& c, Tensors& t, cudaStream_t stream, Workspace& workspace)
      : c_(c), t_(t), stream_(stream), workspace_(workspace) {
    if (c.is_varlen()) varlen_.emplace(c);
    const DType dtype = c.dtype == ref::Precision::bf16 ? DType::bf16 : DType::fp16;
    q_ = view(t.d_q, dtype, c.seqlen_q, c.heads_q, c.rows_q());
    k_ = view(t.d_k, dtype, c.seqlen_k, c.heads_kv, c.rows_k());
    v_ = view(t.d_v, dtype, c.seqlen_k, c.heads_kv, c.rows_k());
    o_ = view(t.d_o, dtype, c.seqlen_q, c.heads_q, c.rows_q());
    options_.causal = c.causal;
    options_.window_left = c.window_left;
    options_.window_right = c.window_right;
    options_.softcap = static_cast<float>(c.softcap);
    options_.deterministic = c.deterministic;
    if (c.mode == Mode::bwd) {
      backward_ = {.q = q_,
                   .k = k_,
                   .v = v_,
                   .o = o_,
                   .dout = view(t.d_dout, dtype, c.seqlen_q, c.heads_q, c.rows_q()),
                   .lse = lse(),
                   .dq = view(t.d_dq, dtype, c.seqlen_q, c.heads_q, c.rows_q()),
                   .dk = view(t.d_dk, dtype, c.seqlen_k, c.heads_kv, c.rows_k()),
                   .dv = view(t.d_dv, dtype, c.seqlen_k, c.heads_kv, c.rows_k())};
    }
  }

  void forward() { check_flash4(flash4::forward(q_, k_, v_, o_, lse(), options_, stream_, workspace_, varlen())); }
  void backward() { check_flash4(flash4::backward(backward_, options_, stream_, workspace_, varlen())); }
  // The call being measured.
  void run() { c_.mode == Mode::fwd ? forward() : backward(); }

 private:
  // (B, seqlen, heads, D), or the packed (1, rows, heads, D) of a varlen case.
  TensorView view(const DeviceBuffer& buffer, DType dtype, int seqlen, int heads, std::size_t rows) const {
    if (c_.is_varlen()) return TensorView::packed(buffer.get(), dtype, static_cast<std::int64_t>(rows), heads, c_.head_dim);
    return TensorView::contiguous(buffer.get(), dtype, {c_.batch, seqlen, heads, c_.head_dim});
  }
  float* lse() const { return static_cast<float*>(t_.d_lse.get()); }
  const VarlenArgs* varlen() const { return varlen_ ? varlen_->args() : nullptr; }

  const Case& c_;
  Tensors& t_;
  cudaStream_t stream_;
  Workspace& workspace_;
  std::optional<DeviceVarlen> varlen_;
  TensorView q_, k_, v_, o_;
  BackwardTensors backward_;
  AttnOptions options_;
};

// Poisons O and LSE, runs the forward, and checks sampled rows on the CPU.
Verification verify(const Case& c, Tensors& t, Launcher& launcher, cudaStream_t stream) {
  check_cuda(cudaMemsetAsync(t.d_o.get(), kPoisonByte, q_elements(c) * kElementBytes, stream), "cudaMemsetAsync");
  check_cuda(cudaMemsetAsync(t.d_lse.get(), kPoisonByte, lse_elements(c) * sizeof(float), stream),
             "cudaMemsetAsync");
  launcher.forward();
  check_cuda(cudaStreamSynchronize(stream), "forward (verification run)");
  std::vector<std::uint16_t> o(q_elements(c));
  std::vector<float> lse(lse_elements(c));
  check_cuda(cudaMemcpy(o.data(), t.d_o.get(), o.size() * kElementBytes, cudaMemcpyDeviceToHost), "cudaMemcpy o");
  check_cuda(cudaMemcpy(lse.data(), t.d_lse.get(), lse.size() * sizeof(float), cudaMemcpyDeviceToHost),
             "cudaMemcpy lse");
  const std::span<const float> q(t.q.data(), q_elements(c));
  const std::span<const float> k(t.k.data(), kv_elements(c));
  const std::span<const float> v(t.v.data(), kv_elements(c));
  return verify_forward(c, q, k, v, o, lse);
}

// Runs the forward (for O and LSE), poisons dq, dk and dv, runs the backward once, and checks sampled rows on the
// CPU against an fp64 backward from the same O and LSE.
Verification verify_gradients(const Case& c, Tensors& t, Launcher& launcher, cudaStream_t stream) {
  launcher.forward();
  for (const DeviceBuffer* gradient : {&t.d_dq, &t.d_dk, &t.d_dv}) {
    check_cuda(cudaMemsetAsync(gradient->get(), kPoisonByte, gradient->bytes(), stream), "cudaMemsetAsync");
  }
  launcher.backward();
  check_cuda(cudaStreamSynchronize(stream), "backward (verification run)");
  const auto download = [](const DeviceBuffer& buffer, std::size_t elements, const char* what) {
    std::vector<std::uint16_t> bits(elements);
    check_cuda(cudaMemcpy(bits.data(), buffer.get(), elements * kElementBytes, cudaMemcpyDeviceToHost), what);
    return bits;
  };
  const std::vector<std::uint16_t> o = download(t.d_o, q_elements(c), "cudaMemcpy o");
  const std::vector<std::uint16_t> dq = download(t.d_dq, q_elements(c), "cudaMemcpy dq");
  const std::vector<std::uint16_t> dk = download(t.d_dk, kv_elements(c), "cudaMemcpy dk");
  const std::vector<std::uint16_t> dv = download(t.d_dv, kv_elements(c), "cudaMemcpy dv");
  std::vector<float> lse(lse_elements(c));
  check_cuda(cudaMemcpy(lse.data(), t.d_lse.get(), lse.size() * sizeof(float), cudaMemcpyDeviceToHost),
             "cudaMemcpy lse");
  BackwardData data;
  data.q = {t.q.data(), q_elements(c)};
  data.k = {t.k.data(), kv_elements(c)};
  data.v = {t.v.data(), kv_elements(c)};
  data.dout = {t.dout.data(), q_elements(c)};
  data.o = o;
  data.lse = lse;
  data.dq = dq;
  data.dk = dk;
  data.dv = dv;
  return verify_backward(c, data);
}

// Untimed launches before the timed ones: `warmup` of them, repeated until they have kept the GPU busy for
// kWarmupMs, so that a short case does not start timing before the clocks have come up. (A fixed 10
// launches is 5 ms of a 512-token backward: such cases timed up to a third slower in a sweep than alone.)
constexpr float kWarmupMs = 100.0f;

void warm_up(Launcher& launcher, const Options& options, cudaStream_t stream) {
  if (options.warmup == 0) return;
  Event begin, end;
  check_cuda(cudaEventRecord(begin.get(), stream), "cudaEventRecord");
  for (float elapsed = 0.0f; elapsed < kWarmupMs;) {
    for (int i = 0; i < options.warmup; ++i) launcher.run();
    check_cuda(cudaEventRecord(end.get(), stream), "cudaEventRecord");
    check_cuda(cudaEventSynchronize(end.get()), "warm-up launches");
    check_cuda(cudaEventElapsedTime(&elapsed, begin.get(), end.get()), "cudaEventElapsedTime");
  }
}

// --flush-l2: the size of the buffer zeroed before each timed launch, as triton's do_bench does (more than
// the H200's 60 MB L2).
constexpr std::size_t kL2FlushBytes = std::size_t{256} << 20;

// Median milliseconds of `iters` launches, each between its own pair of events, after the warm-up.
double time_ms(Launcher& launcher, const Options& options, cudaStream_t stream) {
  warm_up(launcher, options, stream);
  const DeviceBuffer flush = options.flush_l2 ? DeviceBuffer(kL2FlushBytes) : DeviceBuffer();
  std::vector<Event> start(options.iters), stop(options.iters);
  for (int i = 0; i < options.iters; ++i) {
    if (options.flush_l2) check_cuda(cudaMemsetAsync(flush.get(), 0, flush.bytes(), stream), "cudaMemsetAsync (L2 flush)");
    check_cuda(cudaEventRecord(start[i].get(), stream), "cudaEventRecord");
    launcher.run();
    check_cuda(cudaEventRecord(stop[i].get(), stream), "cudaEventRecord");
  }
  check_cuda(cudaStreamSynchronize(stream), "timed launches");
  std::vector<float> ms(options.iters);
  for (int i = 0; i < options.iters; ++i) {
    check_cuda(cudaEventElapsedTime(&ms[i], start[i].get(), stop[i].get()), "cudaEventElapsedTime");
  }
  std::sort(ms.begin(), ms.end());
  const std::size_t mid = ms.size() / 2;
  return ms.size() % 2 ? ms[mid] : 0.5 * (ms[mid - 1] + ms[mid]);
}

void print(const Options& options, const Case& c, const Measurement& m) {
  if (options.json) {
    std::printf("%s\n", json_row(c, m).dump().c_str());
  } else {
    std::printf("%s\n", text_line(c, m).c_str());
  }
  std::fflush(stdout);
}

}  // namespace

int run_on_device(const Options& options) {
  const std::vector<Case> list = cases(options);
  Tensors tensors = make_tensors(list, options);
  Stream stream;
  Workspace workspace;  // declared after the stream: it frees on that stream, so it must be destroyed first
  bool all_verified = true;
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t index = 0; index < list.size(); ++index) {
    const Case& c = list[index];
    if (list.size() > 1) {
      const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
      std::fprintf(stderr, "flash4-bench: %s\n", progress_line(index, list.size(), c, elapsed.count()).c_str());
    }
    Launcher launcher(c, tensors, stream.get(), workspace);
    Verification v;
    if (options.verify) {
      v = c.mode == Mode::fwd ? verify(c, tensors, launcher, stream.get())
                              : verify_gradients(c, tensors, launcher, stream.get());
    }
    if (c.mode == Mode::bwd) launcher.forward();  // once, untimed: the backward reads the forward's O and LSE
    const double ms = time_ms(launcher, options, stream.get());
    print(options, c, {.ms = ms, .iters = options.iters, .verification = options.verify ? &v : nullptr});
    all_verified = all_verified && v.ok;
  }
  return all_verified ? kExitOk : kExitVerifyFailed;
}

}  // namespace flash4::bench
