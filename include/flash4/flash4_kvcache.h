/* flash4: attention against a KV cache, for serving (decoding and speculative decoding).
 *
 * The C ABI of flash_attn_with_kvcache. Included by flash4.h; the conventions there hold here too (POD
 * params with struct_size, validation naming the argument before any launch, launches on the caller's
 * stream, nothing synchronizes, prints or exits).
 *
 * What a call computes, per sequence b of the batch:
 *  1. Append: when seqlen_new > 0, rows t < seqlen_new of k_new / v_new are written into the cache at
 *     positions cache_seqlens[b] + t (paged or not).
 *  2. Attend: the seqlen_q query rows of q attend to the cache's first cache_seqlens[b] + seqlen_new keys
 *     (the appended ones included), with the masks of flash4.h: causal and windows bottom-right aligned
 *     to that length, so query row i's diagonal is key i + (cache_seqlens[b] + seqlen_new - seqlen_q).
 *     A row that sees no key (an empty cache, say) gets O = 0 and LSE = -inf.
 *
 * Tensors (element strides, the head dimension contiguous; every pointer 16-byte aligned and every
 * stride a multiple of 16 bytes, as the kernels move 16-byte chunks). D = head_dim is the head dim of q,
 * k_cache and k_new, Dv = head_dim_v (0 in the params means Dv = D) that of v_cache, v_new and o:
 *  - q: (batch, seqlen_q, heads_q, D); o: (batch, seqlen_q, heads_q, Dv)
 *  - k_new, v_new: (batch, seqlen_new, heads_kv, D or Dv)
 *  - k_cache, v_cache, not paged (block_table NULL): (cache_batch, cache_seqlen, heads_kv, D or Dv);
 *    sequence b uses cache sequence cache_batch_idx[b] (b when cache_batch_idx is NULL), whose capacity
 *    is cache_seqlen keys.
 *  - k_cache, v_cache, paged: (num_pages, page_size, heads_kv, D or Dv); key j of sequence b lives in
 *    page block_table[b * block_table_stride + j / page_size], row j % page_size. The capacity of a
 *    sequence is max_pages_per_seq * page_size keys. Any page_size >= 1 works.
 *  - lse (optional): fp32 (batch, heads_q, seqlen_q) contiguous, natural log.
 *
 * Head dims: D and Dv are multiples of 8 in [8, 256], any pair (e.g. 192 with 128); anything else is
 * UNSUPPORTED_HEAD_DIM, naming head_dim or head_dim_v. Decode kernels are built for the widths 64, 128,
 * 192 and 256 among CMake's FLASH4_HEAD_DIMS; a call is served by the smallest built one >= max(D, Dv)
 * (FLASH4_ERROR_NO_KERNEL naming the dims when none is). Its loads read exactly D (q, k) or Dv (v)
 * columns and fill the rest of the kernel's width with zeros, which changes no score and no output
 * column; nothing is written past column Dv of o, nor past column D of a k_cache row or Dv of a v_cache
 * row.
 *
 * Device-side values. cache_seqlens, cache_batch_idx and block_table live in device memory, so the host
 * cannot check them without synchronizing; the kernels check them and never read or write outside the
 * cache:
 *  - a sequence with cache_seqlens[b] < 0, cache_seqlens[b] + seqlen_new > its capacity, or (not paged)
 *    cache_batch_idx[b] outside [0, cache_batch) appends nothing, and all its output rows are NaN
 *    (O and LSE);
 *  - a block_table entry outside [0, num_pages) is never dereferenced: a key on such a page is not read
 *    and an appended row for it is not written, and the output rows that would have used it (possibly
 *    more rows of that sequence) are NaN. Only the entries of pages holding the sequence's first
 *    cache_seqlens[b] + seqlen_new keys are looked at: the table may hold anything past them.
 * The Python front end (flash4.flash_attn_with_kvcache) checks these values on the host in eager mode.
 * Sequences that share cache rows (repeated cache_batch_idx entries, pages shared between sequences) and
 * append into them race: which value lands is undefined, as in FlashAttention.
 *
 * Query heads are packed per KV head: one kernel block handles all heads_q / heads_kv query heads of a
 * KV head for up to 64 (query row, head) pairs, so each K/V byte is read once per call for decoding.
 * When the batch has too few (sequence, KV head) pairs to fill the GPU, the key range is split across
 * blocks (split-KV) and the partial results are merged through their LSE; num_splits = 0 lets a heuristic
 * choose (from the SM count and the shapes), num_splits >= 1 asks for that many (at most one per 64-key
 * block of the capacity). More than one split needs a workspace (flash4_kvcache_workspace_size).
 */
#ifndef FLASH4_FLASH4_KVCACHE_H
#define FLASH4_FLASH4_KVCACHE_H

#include "flash4/flash4.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct flash4_kvcache_params {
  size_t struct_size; /* sizeof(flash4_kvcache_params) as the caller compiled it */
  flash4_dtype dtype;

  const void* q;
  void* k_cache; /* written only where rows are appended */
  void* v_cache;
  const void* k_new; /* optional: NULL when seqlen_new is 0 */
  const void* v_new;
  void* o;
  float* lse; /* optional (NULL: not written) */
  flash4_strides q_strides, k_cache_strides, v_cache_strides, k_new_strides, v_new_strides, o_strides;

  int32_t batch;
  int32_t seqlen_q;   /* >= 1 */
  int32_t seqlen_new; /* rows of k_new / v_new per sequence; 0: nothing is appended */
  int32_t heads_q;
  int32_t heads_kv;
  int32_t head_dim; /* of q, k_cache, k_new: a multiple of 8 in [8, 256] */

  /* Not paged (block_table NULL): the cache's first two dimensions. Ignored when paged. */
  int32_t cache_batch;
  int32_t cache_seqlen;
  /* Paged: int32 device array of batch rows, block_table_stride (>= max_pages_per_seq) elements apart. */
  const int32_t* block_table;
  int64_t block_table_stride;
  int32_t max_pages_per_seq;
  int32_t num_pages;
  int32_t page_size;

  const int32_t* cache_seqlens;   /* int32 device (batch,); NULL: every sequence fills its capacity */
  const int32_t* cache_batch_idx; /* int32 device (batch,), not paged only; NULL: sequence b is cache row b */

  float softmax_scale; /* > 0 */
  int32_t causal;      /* 0 or 1 */
  int32_t window_left; /* -1: unbounded */
  int32_t window_right;
  float softcap; /* 0: off */
  int32_t num_splits; /* 0: heuristic; >= 1: that many splits of the key range (at most 128) */

  void* workspace; /* at least flash4_kvcache_workspace_size() bytes, 256-byte aligned; NULL if that is 0 */
  size_t workspace_bytes;

  /* Appended after the first layout (0 for a caller of the older one). */
  int32_t head_dim_v; /* of v_cache, v_new, o: 0 (equal to head_dim) or a multiple of 8 in [8, 256] */
} flash4_kvcache_params;

/* Validate params without launching anything. */
FLASH4_API flash4_status flash4_kvcache_check(const flash4_kvcache_params* params);
/* Device workspace the call needs, in bytes (0 when it runs unsplit). It depends on the current device's
 * SM count when num_splits is 0: size it on the device the call will run on. */
FLASH4_API flash4_status flash4_kvcache_workspace_size(const flash4_kvcache_params* params, size_t* bytes);
/* Enqueue the append, the attention and (when split) the merge on `stream`. Asynchronous. */
FLASH4_API flash4_status flash4_kvcache(const flash4_kvcache_params* params, flash4_stream_t stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FLASH4_FLASH4_KVCACHE_H */
