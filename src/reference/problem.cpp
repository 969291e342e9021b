// Problem checks, description and the mask predicate shared by every reference function.
#include <cmath>
#include <sstream>
#include <stdexcept>
#include <string>

#include "reference/reference.hpp"

namespace flash4::ref {
namespace {

void require(bool condition, const std::string& message) {
  if (!condition) throw std::invalid_argument("flash4::ref::Problem: " + message);
}

void validate_offsets(const std::vector<int>& offsets, int batch, const char* field) {
  require(offsets.size() == static_cast<std::size_t>(batch) + 1,
          std::string(field) + " must hold batch + 1 offsets");
  require(offsets.front() == 0, std::string(field) + "[0] must be 0");
  for (std::size_t b = 0; b + 1 < offsets.size(); ++b) {
    require(offsets[b] <= offsets[b + 1], std::string(field) + " must be non-decreasing");
  }
}

void validate_used(const Problem& p, const std::vector<int>& used, bool query_side, const char* field) {
  if (used.empty()) return;
  require(used.size() == static_cast<std::size_t>(p.batch), std::string(field) + " must hold batch entries");
  for (int b = 0; b < p.batch; ++b) {
    const int span = query_side ? p.span_q(b) : p.span_k(b);
    require(used[b] >= 0 && used[b] <= span, std::string(field) + " entries must lie in [0, the sequence's rows]");
  }
}

}  // namespace

void validate(const Problem& p) {
  require(p.batch >= 1, "batch must be >= 1");
  require(p.heads_q >= 1 && p.heads_kv >= 1, "heads_q and heads_kv must be >= 1");
  require(p.heads_q % p.heads_kv == 0, "heads_q must be a multiple of heads_kv");
  require(p.head_dim >= 1, "head_dim must be >= 1");
  require(p.head_dim_v >= 0, "head_dim_v must be >= 1, or 0 (equal to head_dim)");
  require(std::isfinite(p.scale), "scale must be finite");
  require(std::isfinite(p.softcap) && p.softcap >= 0, "softcap must be 0 (off) or positive");
  require(p.window_left >= -1 && p.window_right >= -1, "window sizes must be >= 0, or -1 (unbounded)");
  require(p.cu_seqlens_q.empty() == p.cu_seqlens_k.empty(), "cu_seqlens_q and cu_seqlens_k: set both or neither");
  if (p.is_varlen()) {
    validate_offsets(p.cu_seqlens_q, p.batch, "cu_seqlens_q");
    validate_offsets(p.cu_seqlens_k, p.batch, "cu_seqlens_k");
  } else {
    require(p.seqlen_q >= 0 && p.seqlen_k >= 0, "seqlen_q and seqlen_k must be >= 0");
  }
  validate_used(p, p.seqused_q, true, "seqused_q");
  validate_used(p, p.seqused_k, false, "seqused_k");
  require(p.sink.empty() || p.sink.size() == static_cast<std::size_t>(p.heads_q), "sink must hold heads_q logits");
}

std::string to_string(const Problem& p) {
  std::ostringstream out;
  out << "batch " << p.batch;
  if (p.is_varlen()) {
    out << " varlen q [";
    for (int offset : p.cu_seqlens_q) out << ' ' << offset;
    out << " ] k [";
    for (int offset : p.cu_seqlens_k) out << ' ' << offset;
    out << " ]";
  } else {
    out << " seqlen_q " << p.seqlen_q << " seqlen_k " << p.seqlen_k;
  }
  const auto list = [&out](const char* name, const auto& values) {
    if (values.empty()) return;
    out << ' ' << name << " [";
    for (const auto value : values) out << ' ' << value;
    out << " ]";
  };
  list("seqused_q", p.seqused_q);
  list("seqused_k", p.seqused_k);
  list("sink", p.sink);
  out << " heads " << p.heads_q << "/" << p.heads_kv << " head_dim " << p.head_dim;
  if (p.head_dim_v != 0) out << " head_dim_v " << p.head_dim_v;
  out << " scale " << p.scale
      << " causal " << p.causal << " window (" << p.window_left << ", " << p.window_right << ") softcap "
      << p.softcap;
  return out.str();
}

bool key_visible(const Problem& p, int sq, int sk, int i, int j) {
  // Bottom-right alignment: the last query row lines up with the last key.
  const int diagonal = i + sk - sq;
  return j >= 0 && j < sk && (!p.causal || j <= diagonal) &&
         (p.window_left < 0 || j >= diagonal - p.window_left) &&
         (p.window_right < 0 || j <= diagonal + p.window_right);
}

}  // namespace flash4::ref
