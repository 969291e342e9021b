// flash4-bench: times flash4's forward and/or backward on shapes from flags or the anchors' sweep, and prints
// one line per case (text, or JSON with --json): median time over per-launch CUDA event pairs, TFLOPS with the
// anchors' FLOP count, GB/s of compulsory traffic and, with --verify, sampled-row errors against the fp64 CPU
// reference. The backward's timed launches are flash4_bwd alone: the forward runs once before them, for the O
// and LSE the backward reads. `flash4-bench --help` lists the flags and exit statuses.
//
// Inputs are unit-normal values made on the host (this file is host code: no device fill kernels) once, for the
// largest case, and every case reads a prefix of them. The anchors' cases hold 16K tokens x 2048 wide = 64 MB per
// tensor, more than the H200's 60 MB L2, so the timed launches read q, k and v from DRAM.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <span>
#include <string>
#include <vector>

#include "cases.hpp"
#include "cpu_demo.hpp"
#include "cuda_util.hpp"
#include "reference/reference.hpp"
#include "verify.hpp"

namespace flash4::bench {
namespace {

constexpr std::size_t kElementBytes = 2;
// cudaMemset pattern that makes every bf16 / fp16 element a NaN and every fp32 LSE a NaN: an output the kernel
// fails to write cannot pass --verify by accident.
constexpr int kPoisonByte = 0xFF;

std::size_t q_elements(const Case& c) {
  return static_cast<std::size_t>(c.batch) * c.seqlen_q * c.heads_q * c.head_dim;
}
std::size_t kv_elements(const Case& c) {
  return static_cast<std::size_t>(c.batch) * c.seqlen_k * c.heads_kv * c.head_dim;
}
std::size_t lse_elements(const Case& c) { return static_cast<std::size_t>(c.batch) * c.seqlen_q * c.heads_q; }

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

// One case's calls: the forward, and the backward over the forward's output.
class Launcher {
 public:
  Launcher(const Case& c, Tensors& t, cudaStream_t stream, Workspace& workspace)
      : c_(c), t_(t), stream_(stream), workspace_(workspace) {
    const DType dtype = c.dtype == ref::Precision::bf16 ? DType::bf16 : DType::fp16;
    q_ = view(t.d_q, dtype, c.seqlen_q, c.heads_q);
    k_ = view(t.d_k, dtype, c.seqlen_k, c.heads_kv);
    v_ = view(t.d_v, dtype, c.seqlen_k, c.heads_kv);
    o_ = view(t.d_o, dtype, c.seqlen_q, c.heads_q);
    options_.causal = c.causal;
    options_.deterministic = c.deterministic;
    if (c.mode == Mode::bwd) {
      backward_ = {.q = q_,
                   .k = k_,
                   .v = v_,
                   .o = o_,
                   .dout = view(t.d_dout, dtype, c.seqlen_q, c.heads_q),
                   .lse = lse(),
                   .dq = view(t.d_dq, dtype, c.seqlen_q, c.heads_q),
                   .dk = view(t.d_dk, dtype, c.seqlen_k, c.heads_kv),
                   .dv = view(t.d_dv, dtype, c.seqlen_k, c.heads_kv)};
    }
  }

  void forward() { check_flash4(flash4::forward(q_, k_, v_, o_, lse(), options_, stream_, workspace_)); }
  void backward() { check_flash4(flash4::backward(backward_, options_, stream_, workspace_)); }
  // The call being measured.
  void run() { c_.mode == Mode::fwd ? forward() : backward(); }

 private:
  TensorView view(const DeviceBuffer& buffer, DType dtype, int seqlen, int heads) const {
    return TensorView::contiguous(buffer.get(), dtype, {c_.batch, seqlen, heads, c_.head_dim});
  }
  float* lse() const { return static_cast<float*>(t_.d_lse.get()); }

  const Case& c_;
  Tensors& t_;
  cudaStream_t stream_;
  Workspace& workspace_;
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

const char* verify_word(const Options& options, const Verification& v) {
  if (!options.verify) return "skipped";
  return v.ok ? "ok" : "fail";
}

void print(const Options& options, const Case& c, double ms, const Verification& v) {
  const double tflops = flops(c) / (ms * 1e-3) / 1e12;
  const double gbps = bytes_moved(c) / (ms * 1e-3) / 1e9;
  const char* mode = c.mode == Mode::fwd ? "fwd" : "bwd";
  const std::string dtype(ref::name(c.dtype));
  const char* verdict = verify_word(options, v);
  const bool checked = options.verify;
  const bool fwd = c.mode == Mode::fwd;
  if (options.json) {
    std::printf(
        "{\"mode\": \"%s\", \"dtype\": \"%s\", \"D\": %d, \"causal\": %d, \"N\": %d, \"Sq\": %d, \"Sk\": %d, "
        "\"B\": %d, \"H\": %d, \"Hkv\": %d, \"provider\": \"flash4\", \"ms\": %.5f, \"tflops\": %.1f, "
        "\"gbps\": %.1f, \"iters\": %d, \"verify\": \"%s\"",
        mode, dtype.c_str(), c.head_dim, c.causal ? 1 : 0, c.seqlen_q, c.seqlen_q, c.seqlen_k, c.batch, c.heads_q,
        c.heads_kv, ms, tflops, gbps, options.iters, verdict);
    if (!fwd) std::printf(", \"deterministic\": %d", c.deterministic ? 1 : 0);
    if (checked && fwd) std::printf(", \"max_err_o\": %.3e, \"max_err_lse\": %.3e", v.max_err_o, v.max_err_lse);
    if (checked && !fwd) {
      std::printf(", \"max_rel_err_dq\": %.3e, \"max_rel_err_dk\": %.3e, \"max_rel_err_dv\": %.3e", v.max_err_dq,
                  v.max_err_dk, v.max_err_dv);
    }
    std::printf("}\n");
  } else {
    std::printf("%s %s D=%d causal=%d B=%d Sq=%d Sk=%d H=%d Hkv=%d: %.4f ms, %.1f TFLOPS, %.0f GB/s, verify %s",
                mode, dtype.c_str(), c.head_dim, c.causal ? 1 : 0, c.batch, c.seqlen_q, c.seqlen_k, c.heads_q,
                c.heads_kv, ms, tflops, gbps, verdict);
    if (!fwd && c.deterministic) std::printf(", deterministic");
    if (checked && fwd) std::printf(" (max |dO| %.2e, max rel |dLSE| %.2e)", v.max_err_o, v.max_err_lse);
    if (checked && !fwd) {
      std::printf(" (max rel err dQ %.2e, dK %.2e, dV %.2e)", v.max_err_dq, v.max_err_dk, v.max_err_dv);
    }
    std::printf("\n");
  }
  std::fflush(stdout);
}

// Runs every case; returns the exit status.
int run(const Options& options) {
  const std::vector<Case> list = cases(options);
  Tensors tensors = make_tensors(list, options);
  Stream stream;
  Workspace workspace;  // declared after the stream: it frees on that stream, so it must be destroyed first
  bool all_verified = true;
  for (const Case& c : list) {
    Launcher launcher(c, tensors, stream.get(), workspace);
    Verification v;
    if (options.verify) {
      v = c.mode == Mode::fwd ? verify(c, tensors, launcher, stream.get())
                              : verify_gradients(c, tensors, launcher, stream.get());
    }
    if (c.mode == Mode::bwd) launcher.forward();  // once, untimed: the backward reads the forward's O and LSE
    const double ms = time_ms(launcher, options, stream.get());
    print(options, c, ms, v);
    all_verified = all_verified && v.ok;
  }
  return all_verified ? kExitOk : kExitVerifyFailed;
}

}  // namespace
}  // namespace flash4::bench

int main(int argc, char** argv) {
  using namespace flash4::bench;
  const Parsed parsed = parse_options(argc, argv);
  if (!parsed.options) {
    std::fprintf(stderr, "flash4-bench: %s\n%s", parsed.error.c_str(), usage().c_str());
    return kExitUsage;
  }
  const Options& options = *parsed.options;
  if (options.help) {
    std::printf("%s", usage().c_str());
    return kExitOk;
  }

  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("flash4-bench: no CUDA device found; running the CPU reference demo instead\n");
    return run_cpu_demo(options);
  }
  try {
    return run(options);
  } catch (const Flash4Error& e) {
    std::fprintf(stderr, "flash4-bench: %s\n", e.what());
    if (e.code == FLASH4_ERROR_NOT_IMPLEMENTED) {
      std::fprintf(stderr, "flash4-bench: this flash4 build does not implement that mode yet\n");
      return kExitNotImplemented;
    }
    return kExitError;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flash4-bench: %s\n", e.what());
    return kExitError;
  }
}
