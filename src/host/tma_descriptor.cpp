#include "host/tma_descriptor.hpp"

#include <cuda_runtime.h>

#include <array>
#include <mutex>

namespace flash4::host {
namespace {

using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiledFn encode_tiled_fn(std::string& error) {
  static EncodeTiledFn fn = nullptr;
  static std::string lookup_error;
  static std::once_flag once;
  std::call_once(once, [] {
    void* symbol = nullptr;
    cudaDriverEntryPointQueryResult found{};
    const cudaError_t status =
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &symbol, 12000, cudaEnableDefault, &found);
    if (status != cudaSuccess || found != cudaDriverEntryPointSuccess || symbol == nullptr) {
      lookup_error = std::string("cudaGetDriverEntryPointByVersion(cuTensorMapEncodeTiled) failed: ") +
                     cudaGetErrorString(status);
      return;
    }
    fn = reinterpret_cast<EncodeTiledFn>(symbol);
  });
  if (fn == nullptr) error = lookup_error;
  return fn;
}

bool encode_uncached(const TmaView& view, CUtensorMap* map, std::string& error) {
  const EncodeTiledFn encode = encode_tiled_fn(error);
  if (encode == nullptr) return false;
  const cuuint64_t extent[4] = {view.extent[0], view.extent[1], view.extent[2], view.extent[3]};
  const cuuint64_t strides[3] = {view.stride_bytes[0], view.stride_bytes[1], view.stride_bytes[2]};
  const cuuint32_t box[4] = {view.box_cols, view.box_rows, 1, 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  const CUtensorMapSwizzle swizzle =
      view.swizzle_bytes == 128  ? CU_TENSOR_MAP_SWIZZLE_128B
      : view.swizzle_bytes == 64 ? CU_TENSOR_MAP_SWIZZLE_64B
                                 : CU_TENSOR_MAP_SWIZZLE_NONE;
  // Out-of-bounds rows (tails past seqlen) are filled with zeros, which the masks then ignore.
  const CUresult result = encode(map, view.element_type, 4, const_cast<void*>(view.base), extent, strides, box,
                                 element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS) {
    error = "cuTensorMapEncodeTiled failed with CUresult " + std::to_string(int(result));
    return false;
  }
  return true;
}

// The most recently encoded maps of this thread, oldest replaced first. A forward uses up to four maps
// and a backward about ten; the capacity holds a few calls' worth.
class RecentMaps {
 public:
  const CUtensorMap* find(const TmaView& view) const {
    for (int i = 0; i < count_; ++i) {
      if (entries_[i].view == view) return &entries_[i].map;
    }
    return nullptr;
  }
  void add(const TmaView& view, const CUtensorMap& map) {
    entries_[next_] = Entry{view, map};
    next_ = (next_ + 1) % kCapacity;
    if (count_ < kCapacity) ++count_;
  }

 private:
  static constexpr int kCapacity = 32;
  struct Entry {
    TmaView view;
    CUtensorMap map;
  };
  std::array<Entry, kCapacity> entries_{};
  int count_ = 0;
  int next_ = 0;
};

}  // namespace

bool encode_tma_view(const TmaView& view, CUtensorMap* map, std::string& error) {
  thread_local RecentMaps recent;
  if (const CUtensorMap* known = recent.find(view)) {
    *map = *known;
    return true;
  }
  if (!encode_uncached(view, map, error)) return false;
  recent.add(view, *map);
  return true;
}

TmaView make_operand_view(const OperandShape& shape, int box_rows, int box_cols, int swizzle_bytes) {
  constexpr int kBytes = 2;  // bf16 and fp16
  TmaView view;
  view.base = shape.base;
  view.element_type = shape.is_bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  view.element_bytes = kBytes;
  const uint64_t batch = shape.varlen ? 1 : uint64_t(shape.batch);
  view.extent = {uint64_t(shape.head_dim), uint64_t(shape.rows), uint64_t(shape.heads), batch};
  const uint64_t seq_bytes = uint64_t(shape.stride_seq) * kBytes;
  // The batch stride of a single-slice axis is never used; any valid (16-byte multiple) value will do.
  const uint64_t batch_bytes = shape.varlen ? seq_bytes : uint64_t(shape.stride_batch) * kBytes;
  view.stride_bytes = {seq_bytes, uint64_t(shape.stride_head) * kBytes, batch_bytes};
  view.box_cols = uint32_t(box_cols);
  view.box_rows = uint32_t(box_rows);
  view.swizzle_bytes = swizzle_bytes;
  return view;
}

}  // namespace flash4::host
