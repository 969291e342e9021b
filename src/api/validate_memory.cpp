// Validation rules 9-12 of flash4.h: the memory the params point at. Pointers and strides as TMA needs them,
// the size limits that keep the kernels' int32 indices from overflowing, and outputs that neither overlap
// themselves nor share memory with another tensor. Reads only the params, never device memory.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>

#include "api/validate_parts.hpp"

namespace flash4::api::detail {
namespace {

// TMA (cp.async.bulk.tensor) loads and stores q, k, v and o: it needs 16-byte aligned base addresses and
// strides, and cuTensorMapEncodeTiled rejects strides of 2^40 bytes or more.
constexpr std::int64_t kTmaAlignBytes = 16;
constexpr std::int64_t kTmaMaxStrideBytes = std::int64_t{1} << 40;
// LSE is fp32, written and read with plain loads and stores.
constexpr std::uintptr_t kLseAlignBytes = alignof(float);
constexpr std::int64_t kLseBytes = sizeof(float);
constexpr std::int64_t kCuSeqlensBytes = sizeof(std::int32_t);
constexpr std::int64_t kBlockTableBytes = sizeof(std::int32_t);
// The kernels index (row, head) pairs and LSE entries with int32: a 64-bit index costs two registers and
// several instructions per operation in consumer warpgroups whose registers are spent on the accumulators.
constexpr std::int64_t kMaxRowHeads = std::numeric_limits<std::int32_t>::max();
// Mask arithmetic adds a few lengths and a window (no longer than a length once canonical) in int32:
// 2^29 leaves room for four of them plus a block.
constexpr std::int64_t kMaxSeqlen = FLASH4_MAX_SEQLEN;
// Tiles are (sequence, head, block of at least 64 rows): their count, and a persistent grid's index one grid
// past the last tile, must fit int32; 2^30 blocks leave a factor of two for that.
constexpr std::int64_t kMaxBlocks = FLASH4_MAX_BLOCKS;
constexpr std::int64_t kBlockRows = FLASH4_BLOCK_ROWS;

// ---- rule 9: pointers --------------------------------------------------------------------------------------

Check check_pointers(const Problem& p, const std::vector<Tensor>& tensors, Lse lse) {
  for (const Tensor& t : tensors) {
    if (rows(p, t.side) == 0) continue;
    if (t.data == nullptr) {
      return fail(FLASH4_ERROR_NULL_POINTER, t.name, " is NULL; it must point to device memory");
    }
    if (reinterpret_cast<std::uintptr_t>(t.data) % kTmaAlignBytes != 0) {
      return fail(FLASH4_ERROR_MISALIGNED, t.name, " is not ", kTmaAlignBytes,
                  "-byte aligned; TMA needs 16-byte aligned base addresses");
    }
  }
  if (lse.data == nullptr && lse.required && rows(p, Side::query) > 0) {
    return fail(FLASH4_ERROR_NULL_POINTER, "lse is NULL; the backward needs the lse written by flash4_fwd");
  }
  if (reinterpret_cast<std::uintptr_t>(lse.data) % kLseAlignBytes != 0) {
    return fail(FLASH4_ERROR_MISALIGNED, "lse is not ", kLseAlignBytes, "-byte aligned (fp32 array)");
  }
  if (p.backward && (p.sink == nullptr) != (p.dsink == nullptr)) {
    if (p.sink != nullptr) {
      return fail(FLASH4_ERROR_NULL_POINTER, "dsink is NULL; with sink set the backward writes the sinks' gradient");
    }
    return fail(FLASH4_ERROR_INVALID_ARGUMENT, "dsink is set but sink is NULL; dsink is the gradient of the sinks");
  }
  for (const auto& [name, pointer] : {std::pair{"sink", static_cast<const void*>(p.sink)},
                                      std::pair{"dsink", static_cast<const void*>(p.dsink)}}) {
    if (reinterpret_cast<std::uintptr_t>(pointer) % kLseAlignBytes != 0) {
      return fail(FLASH4_ERROR_MISALIGNED, name, " is not ", kLseAlignBytes, "-byte aligned (fp32 array)");
    }
  }
  return {};
}

// ---- rule 10: strides --------------------------------------------------------------------------------------

const char* dtype_name(const Problem& p) { return p.dtype == FLASH4_DTYPE_BF16 ? "bf16" : "fp16"; }

Check check_stride(const Problem& p, const Tensor& t, const char* field, std::int64_t stride) {
  if (stride <= 0) {
    return fail(FLASH4_ERROR_INVALID_ARGUMENT, t.name, "_strides.", field, " is ", stride,
                "; strides are in elements and must be > 0");
  }
  if (stride >= kTmaMaxStrideBytes / kElementBytes) {
    return fail(FLASH4_ERROR_SIZE_OVERFLOW, t.name, "_strides.", field, " is ", stride,
                " elements; TMA strides must be < 2^40 bytes");
  }
  if (stride * kElementBytes % kTmaAlignBytes != 0) {
    return fail(FLASH4_ERROR_MISALIGNED, t.name, "_strides.", field, " is ", stride, " elements (",
                stride * kElementBytes, " bytes); every stride must be a multiple of ", kTmaAlignBytes, " bytes (",
                kTmaAlignBytes / kElementBytes, " elements of ", dtype_name(p), ")");
  }
  return {};
}

Check check_strides(const Problem& p, const std::vector<Tensor>& tensors) {
  for (const Tensor& t : tensors) {
    if (rows(p, t.side) == 0) continue;
    // Varlen tensors are packed (total, heads, dim): their batch stride is ignored; a paged cache's is the
    // page stride.
    if (!p.varlen() || paged(p, t.side)) {
      if (Check c = check_stride(p, t, "batch", t.strides.batch); !c.ok()) return c;
    }
    if (Check c = check_stride(p, t, "seq", t.strides.seq); !c.ok()) return c;
    if (Check c = check_stride(p, t, "head", t.strides.head); !c.ok()) return c;
  }
  return {};
}

// ---- rule 11: size limits ----------------------------------------------------------------------------------

// One dimension of a tensor: how many indices, and the elements between neighbours.
struct Dim {
  std::int64_t extent;
  std::int64_t stride;
};

// (batch, seq, head, its head dim) of a tensor; varlen tensors are packed, one batch of all rows.
struct Layout {
  Dim dims[4];
};

Layout layout_of(const Problem& p, const Tensor& t) {
  const std::int64_t batch = paged(p, t.side) ? p.num_pages : p.varlen() ? 1 : p.batch;
  return Layout{{{batch, t.strides.batch},
                 {rows(p, t.side) / batch, t.strides.seq},
                 {heads(p, t.side), t.strides.head},
                 {t.head_dim, 1}}};
}

// a * b + c in int64, or nothing on overflow.
std::optional<std::int64_t> mul_add(std::int64_t a, std::int64_t b, std::int64_t c) {
  std::int64_t product = 0;
  std::int64_t sum = 0;
  if (__builtin_mul_overflow(a, b, &product) || __builtin_add_overflow(product, c, &sum)) return std::nullopt;
  return sum;
}

// The byte offset of the tensor's last byte, or nothing when it overflows int64.
std::optional<std::int64_t> last_byte(const Layout& layout) {
  std::optional<std::int64_t> elements = 0;
  for (const Dim& d : layout.dims) {
    if (elements) elements = mul_add(d.extent - 1, d.stride, *elements);
  }
  return elements ? mul_add(*elements + 1, kElementBytes, -1) : std::nullopt;
}

// Whether [data, data + last] stays below the end of the address space.
bool fits_address_space(const void* data, std::int64_t last) {
  return static_cast<std::uint64_t>(last) <= std::numeric_limits<std::uintptr_t>::max() - reinterpret_cast<std::uintptr_t>(data);
}

// lse (rows_q * heads_q floats), sink and dsink (heads_q floats), seqused_q / seqused_k (batch int32), varlen,
// the batch + 1 int32 offsets of cu_seqlens_q / cu_seqlens_k and, paged, the block table's entries the kernel
// may read: the arrays besides the tensors, when they hold anything.
struct Array {
  const char* name;
  const void* data;
  std::optional<std::int64_t> last;  // its last byte's offset; nothing when that overflows int64 (rule 11b)
  bool output;
};

std::vector<Array> arrays(const Problem& p, Lse lse) {
  std::vector<Array> all;
  const std::int64_t lse_entries = rows(p, Side::query) * p.heads_q;
  if (lse.data != nullptr && lse_entries > 0) {
    all.push_back({"lse", lse.data, lse_entries * kLseBytes - 1, lse.output});
  }
  if (p.varlen()) {
    const std::int64_t offsets_bytes = (std::int64_t{p.batch} + 1) * kCuSeqlensBytes;
    all.push_back({"cu_seqlens_q", p.cu_seqlens_q, offsets_bytes - 1, false});
    all.push_back({"cu_seqlens_k", p.cu_seqlens_k, offsets_bytes - 1, false});
  }
  if (p.paged()) {
    // (batch - 1) * stride + pages entries: only rule 6's lower bound holds the stride, so this may overflow.
    const std::optional<std::int64_t> entries = mul_add(p.batch - 1, p.block_table_stride, pages_per_sequence(p));
    if (!entries || *entries > 0) {
      // The last byte, (entries - 1) * 4 + 3: overflows only when it is past 2^63 - 1 itself.
      const std::optional<std::int64_t> last =
          entries ? mul_add(*entries - 1, kBlockTableBytes, kBlockTableBytes - 1) : std::nullopt;
      all.push_back({"block_table", p.block_table, last, false});
    }
  }
  const std::int64_t sink_last = std::int64_t{p.heads_q} * kLseBytes - 1;
  const std::int64_t used_last = std::int64_t{p.batch} * kCuSeqlensBytes - 1;
  for (const Array& a : {Array{"sink", p.sink, sink_last, false}, Array{"dsink", p.dsink, sink_last, true},
                         Array{"seqused_q", p.seqused_q, used_last, false},
                         Array{"seqused_k", p.seqused_k, used_last, false}}) {
    if (a.data != nullptr) all.push_back(a);
  }
  return all;
}

Check check_lengths(const Problem& p) {
  const Field lengths[] = {p.varlen() ? Field{"total_q", p.total_q} : Field{"seqlen_q", p.seqlen_q},
                           p.varlen() ? Field{"total_k", p.total_k} : Field{"seqlen_k", p.seqlen_k}};
  for (const auto& [name, value] : lengths) {
    if (value > kMaxSeqlen) {
      return fail(FLASH4_ERROR_SIZE_OVERFLOW, name, " is ", value, "; at most FLASH4_MAX_SEQLEN = ", kMaxSeqlen,
                  " rows (the kernels' mask arithmetic sums lengths in int32)");
    }
  }
  return {};
}

Check check_tensor_sizes(const Problem& p, const std::vector<Tensor>& tensors, Lse lse) {
  for (const Tensor& t : tensors) {
    const std::int64_t all_rows = rows(p, t.side);
    if (all_rows == 0) continue;
    const std::int64_t head_count = heads(p, t.side);
    // all_rows * heads > kMaxRowHeads, by division so that it cannot overflow.
    if (all_rows > kMaxRowHeads / head_count) {
      return fail(FLASH4_ERROR_SIZE_OVERFLOW, t.name, ": ", all_rows, " rows x ", head_count, " heads is more than ",
                  kMaxRowHeads, " (row, head) pairs; the kernels index rows, LSE entries and tiles with int32");
    }
    const std::optional<std::int64_t> last = last_byte(layout_of(p, t));
    if (!last) {
      return fail(FLASH4_ERROR_SIZE_OVERFLOW, t.name,
                  ": the largest byte offset its sizes and strides reach overflows int64");
    }
    if (!fits_address_space(t.data, *last)) {
      return fail(FLASH4_ERROR_SIZE_OVERFLOW, t.name, ": its last byte (offset ", *last,
                  ") lies past the end of the address space");
    }
  }
  for (const Array& a : arrays(p, lse)) {
    if (!a.last) {
      return fail(FLASH4_ERROR_SIZE_OVERFLOW, a.name,
                  ": the largest byte offset its sizes and strides reach overflows int64");
    }
    if (!fits_address_space(a.data, *a.last)) {
      return fail(FLASH4_ERROR_SIZE_OVERFLOW, a.name, ": its last byte (offset ", *a.last,
                  ") lies past the end of the address space");
    }
  }
  return {};
}

Check check_blocks(const Problem& p) {
  for (const Side side : {Side::query, Side::key}) {
    const std::int64_t blocks_per_sequence = (longest(p, side) + kBlockRows - 1) / kBlockRows;  // <= 2^23
    const std::int64_t sequence_heads = std::int64_t{p.batch} * heads(p, side);                   // < 2^62
    if (blocks_per_sequence > 0 && sequence_heads > kMaxBlocks / blocks_per_sequence) {
      const bool query = side == Side::query;
      const char* length = p.varlen() ? (query ? "max_seqlen_q" : "max_seqlen_k") : (query ? "seqlen_q" : "seqlen_k");
      return fail(FLASH4_ERROR_SIZE_OVERFLOW, length, ": batch (", p.batch, ") x ", query ? "heads_q" : "heads_kv",
                  " (", heads(p, side), ") x ", blocks_per_sequence, " blocks of ", kBlockRows,
                  " rows is more than FLASH4_MAX_BLOCKS = ", kMaxBlocks, "; the kernels number their tiles with int32",
                  p.varlen() ? " (varlen grids are sized by the longest sequence)" : "");
    }
  }
  return {};
}

// ---- rule 12: overlapping memory ---------------------------------------------------------------------------

// Sorted by stride, each dimension must step past everything the smaller ones reach; then every element has
// its own address. (Some exotic interleavings that do not overlap fail this too; no caller needs them.)
bool overlaps_itself(const Layout& layout) {
  std::vector<Dim> dims;
  for (const Dim& d : layout.dims) {
    if (d.extent > 1) dims.push_back(d);
  }
  std::sort(dims.begin(), dims.end(), [](const Dim& a, const Dim& b) { return a.stride < b.stride; });
  std::int64_t reach = 0;  // < 2^62: the last element's offset bounds it (rule 11)
  for (const Dim& d : dims) {
    if (d.stride <= reach) return true;
    reach += (d.extent - 1) * d.stride;
  }
  return false;
}

// The bytes [first, last] a tensor or array can touch.
struct Span {
  const char* name;
  const Tensor* tensor;  // null for an array
  bool output;
  std::uintptr_t first;
  std::uintptr_t last;

  bool intersects(const Span& other) const { return first <= other.last && other.first <= last; }
};

Span span_of(const char* name, const Tensor* tensor, bool output, const void* data, std::int64_t last) {
  const auto first = reinterpret_cast<std::uintptr_t>(data);
  return Span{name, tensor, output, first, first + static_cast<std::uintptr_t>(last)};  // no wrap: rule 11
}

// Every tensor and array with something in it, outputs first in the order rule 12 checks them (o, lse; dq,
// dk, dv), then the inputs.
std::vector<Span> spans(const Problem& p, const std::vector<Tensor>& tensors, Lse lse) {
  std::vector<Span> all;
  for (const Tensor& t : tensors) {
    if (rows(p, t.side) > 0) all.push_back(span_of(t.name, &t, t.output, t.data, *last_byte(layout_of(p, t))));
  }
  for (const Array& a : arrays(p, lse)) all.push_back(span_of(a.name, nullptr, a.output, a.data, *a.last));
  std::stable_partition(all.begin(), all.end(), [](const Span& s) { return s.output; });
  return all;
}

Check check_overlaps(const Problem& p, const std::vector<Tensor>& tensors, Lse lse) {
  const std::vector<Span> all = spans(p, tensors, lse);
  for (std::size_t i = 0; i < all.size() && all[i].output; ++i) {
    const Span& out = all[i];
    if (out.tensor != nullptr && overlaps_itself(layout_of(p, *out.tensor))) {
      const flash4_strides& s = out.tensor->strides;
      return fail(FLASH4_ERROR_INVALID_ARGUMENT, out.name, " overlaps itself: its strides (batch ", s.batch, ", seq ",
                  s.seq, ", head ", s.head, ") give two elements one address; an output needs an address per element");
    }
    // Against every input, and every output before it (a pair of outputs is reported once, at the later one).
    for (std::size_t j = 0; j < all.size(); ++j) {
      if ((all[j].output ? j < i : true) && out.intersects(all[j])) {
        return fail(FLASH4_ERROR_INVALID_ARGUMENT, out.name, " overlaps ", all[j].name,
                    ": their memory spans intersect; an output may share memory with no input and no other output");
      }
    }
  }
  return {};
}

}  // namespace

Check check_memory(const Problem& p, const std::vector<Tensor>& tensors, Lse lse) {
  if (Check c = check_pointers(p, tensors, lse); !c.ok()) return c;
  if (Check c = check_strides(p, tensors); !c.ok()) return c;
  if (Check c = check_lengths(p); !c.ok()) return c;
  if (Check c = check_tensor_sizes(p, tensors, lse); !c.ok()) return c;
  if (Check c = check_blocks(p); !c.ok()) return c;
  return check_overlaps(p, tensors, lse);
}

}  // namespace flash4::api::detail
