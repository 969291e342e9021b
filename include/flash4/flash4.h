/* flash4: exact attention kernels for NVIDIA Hopper (sm_90a).
 *
 * The C ABI. One POD params struct per direction, filled by the caller (the C++ API and the Python
 * package fill the same structs). Every entry point validates its arguments and returns a status before
 * launching anything; a failing call also leaves a message naming the offending argument, readable with
 * flash4_last_error_message() on the same thread. Launches go on the caller's stream; nothing here
 * synchronizes, prints or exits.
 *
 * Conventions
 *  - Tensors: q, dq (B, Sq, Hq, D); k, dk (B, Sk, Hkv, D); v, dv (B, Sk, Hkv, Dv); o, dout (B, Sq, Hq, Dv),
 *    where D = head_dim and Dv = head_dim_v (0 in the params means Dv = D); strides in elements, int64;
 *    the last (head) dimension must be contiguous. Varlen (cu_seqlens_q != NULL): the query-shaped tensors
 *    are (total_q, Hq, D or Dv) and the key-shaped ones (total_k, Hkv, D or Dv); the batch strides are
 *    ignored; sequence b spans rows [cu_seqlens_q[b], cu_seqlens_q[b+1]).
 *  - lse: fp32, natural log, one value per (batch, head, query row), laid out (B, Hq, Sq) contiguous, or
 *    (Hq, total_q) for varlen. A fully masked row gets O = 0 and LSE = -inf (LSE = the sink's logit with
 *    learnable sinks, below).
 *  - Empty problems: seqlen_q / seqlen_k (total_q / total_k for varlen) may be 0; batch and heads may not.
 *    Such a call is validated like any other. An empty key set masks every query row, so flash4_fwd writes
 *    O = 0 and LSE = -inf (the head's sink logit with sinks) for all of them; flash4_bwd writes dq = 0 when
 *    there are no keys and dk = dv = 0 when there are no queries, and dsink = 0 in both cases. These fills
 *    are asynchronous on the stream and need no workspace; a call with nothing to write (no query rows in
 *    the forward, neither rows and no dsink in the backward) launches nothing.
 *  - Causal masking is bottom-right aligned: query i sees key j iff j <= i + (Sk - Sq).
 *    A sliding window (left, right) keeps j in [i + Sk - Sq - left, i + Sk - Sq + right]; -1 means unbounded.
 *    causal = 1 is FlashAttention's "right window 0": it sets the right edge to 0 whatever window_right is
 *    (any value >= -1 is accepted and ignored); window_left still applies.
 *  - softcap > 0 replaces each score s = scale * q.k by softcap * tanh(s / softcap).
 *  - Head dims: kernels are built for some of 64, 96, 128, 192, 256 (CMake's FLASH4_HEAD_DIMS). A call is
 *    served by the smallest built one >= max(D, Dv), FLASH4_ERROR_NO_KERNEL naming the dims when none is.
 *    Its loads read exactly D (q, k) or Dv (v, o, dout) columns and fill the rest of the kernel's width
 *    with zeros, which changes no score and no output column; nothing is written past column D of dq, dk
 *    or past column Dv of o, dv (the padding of a row stride is left alone), and no padded copy is made.
 *    flash4_kvcache follows the same rule on decode kernels of widths 64, 128, 192 and 256 (a 96 is
 *    served by 128; flash4_kvcache.h), and never writes a cache row past its head dim either.
 *  - Learnable sinks (sink != NULL; FlashAttention-4's learnable_sink, as gpt-oss uses them): sink[h] is one
 *    fp32 logit per query head that joins every row's softmax as one more column without a value. It is
 *    in natural-log units and NOT multiplied by softmax_scale (nor capped), as in FlashAttention-4:
 *      O_i = sum_j exp(s_ij - m) v_j / (sum_j exp(s_ij - m) + exp(sink[h] - m)),
 *      LSE_i = log(sum_j exp(s_ij) + exp(sink[h])).
 *    A row that sees no key gets O = 0 and LSE = sink[h]. The backward takes that LSE, gives dq, dk, dv by
 *    the usual formulas, and writes dsink[h] = -sum over the rows i of head h of exp(sink[h] - LSE_i) *
 *    rowsum(dout_i * o_i): one fp32 per head, reduced in a fixed order (bit-identical across runs in both
 *    modes). The values are read on the device: +inf or NaN logits give undefined results.
 *  - seqused_q / seqused_k (FlashAttention 3's; either or both, fixed length or varlen): sequence b uses
 *    only the first seqused_q[b] query rows and seqused_k[b] key rows of its span (seqlen_q / seqlen_k, or
 *    its cu_seqlens range); the masks align to the used lengths (causal: query i sees key j iff
 *    j <= i + seqused_k[b] - seqused_q[b]). The values live on the device, so the library cannot check
 *    them: one outside [0, span] gives undefined results, as a bad cu_seqlens does.
 *    Unused rows are left untouched, as FlashAttention 3 leaves them: no o or lse is written for unused
 *    query rows, no dq for them and no dk / dv for unused key rows (an empty problem's fills, which the
 *    host writes without reading seqused, are the exception: they cover every row). Unused rows of q, k, v
 *    and dout are still read by the tile loads, so they must hold finite values (their values do not
 *    change the results).
 *
 * Validation rules, checked in this order; a call that breaks several gets the status of the first. Every
 * message starts with the name of the argument it is about. "Rows" are batch * seqlen (fixed length) or
 * total (varlen) of the query-shaped (q, o, dout, dq) or key-shaped (k, v, dk, dv) tensors; with a paged
 * cache (block_table set) k and v have num_pages * page_size rows, laid out (num_pages, page_size, heads_kv,
 * head_dim) with the page stride as their batch stride, in varlen mode too. A tensor without rows is never
 * accessed, and rules 9-12 skip it (its pointer may be NULL). Lk below is the longest key sequence:
 * seqlen_k (fixed length) or min(max_seqlen_k, total_k) (varlen).
 *   1. params != NULL (NULL_POINTER); struct_size is the sizeof of a released layout (INVALID_STRUCT_SIZE).
 *      Fields appended after the caller's layout read as 0 (the first layout ends before head_dim_v).
 *   2. Backward: deterministic is 0 or 1 (INVALID_ARGUMENT).
 *   3. dtype, read as an integer, is FLASH4_DTYPE_BF16 or FLASH4_DTYPE_FP16 (UNSUPPORTED_DTYPE); head_dim
 *      is a multiple of 8 in [8, 256], and head_dim_v is 0 or a multiple of 8 in [8, 256]
 *      (UNSUPPORTED_HEAD_DIM): rows of 16-byte multiples, as TMA needs, up to the widest kernel. Any pair is
 *      accepted (e.g. 192 with 128).
 *   4. cu_seqlens_q and cu_seqlens_k are both NULL or both set (INVALID_VARLEN, naming the NULL one). Varlen:
 *      max_seqlen_q, max_seqlen_k >= 1 and total_q, total_k >= 0 (INVALID_VARLEN); both cu_seqlens 4-byte
 *      aligned (MISALIGNED). seqused_q, seqused_k (either mode) 4-byte aligned when set (MISALIGNED).
 *   5. batch, heads_q, heads_kv >= 1; fixed length: seqlen_q, seqlen_k >= 0 (INVALID_SIZE); heads_q is a
 *      multiple of heads_kv (HEAD_RATIO).
 *   6. Varlen: total_q <= batch * max_seqlen_q and total_k <= batch * max_seqlen_k (INVALID_VARLEN).
 *      Paged (block_table set): page_size a positive multiple of 16 and num_pages >= 1 (INVALID_SIZE);
 *      block_table 4-byte aligned (MISALIGNED); block_table_stride >= ceil(Lk / page_size), the entries a
 *      row must hold (INVALID_ARGUMENT).
 *   7. softmax_scale finite and > 0; softcap finite and >= 0; the fp32 constants the kernels derive from
 *      them finite: softmax_scale * log2(e) without softcap, softcap * log2(e) and softmax_scale / softcap
 *      with it (INVALID_ARGUMENT).
 *   8. causal is 0 or 1; window_left, window_right >= -1 (INVALID_MASK).
 *   9. For q, k, v, o (backward: then dout, dq, dk, dv): non-NULL (NULL_POINTER), 16-byte aligned
 *      (MISALIGNED). lse: the backward's must be non-NULL when there are query rows (NULL_POINTER); 4-byte
 *      aligned when set (MISALIGNED). Backward: dsink non-NULL when sink is set (NULL_POINTER) and NULL when
 *      it is not (INVALID_ARGUMENT). sink, dsink: 4-byte aligned when set (MISALIGNED).
 *  10. For each of those tensors, its batch (fixed length, and paged k / v), seq and head strides: > 0
 *      (INVALID_ARGUMENT), < 2^39 elements (SIZE_OVERFLOW: TMA strides stay below 2^40 bytes), a multiple of
 *      8 elements = 16 bytes (MISALIGNED).
 *  11. Size limits, so that the kernels' int32 indices and sums cannot overflow (SIZE_OVERFLOW):
 *      a. seqlen_q, seqlen_k (fixed length) and total_q, total_k (varlen) <= FLASH4_MAX_SEQLEN = 2^29;
 *      b. for each tensor: rows * heads <= 2^31 - 1; its last element's byte offset
 *         ((batch-1) * stride.batch + (seq-1) * stride.seq + (heads-1) * stride.head + its D or Dv) * 2 - 1
 *         < 2^63 (paged k / v: (num_pages-1) * stride.batch + (page_size-1) * stride.seq + ...), and the
 *         pointer plus that offset does not pass the end of the address space; likewise for lse
 *         (rows_q * heads_q floats), sink and dsink (heads_q floats each), seqused_q / seqused_k (batch int32
 *         each), varlen, cu_seqlens_q / cu_seqlens_k (batch + 1 int32 each) and, paged, block_table
 *         ((batch-1) * block_table_stride + ceil(Lk / page_size) int32, when that is > 0);
 *      c. batch * heads_q * ceil(Lq / 64) and batch * heads_kv * ceil(Lk / 64) <= FLASH4_MAX_BLOCKS = 2^30,
 *         where Lq, Lk are seqlen_q, seqlen_k (fixed length) or min(max_seqlen, total) (varlen): blocks of
 *         64 rows over every (sequence, head), the count the kernels' tile indices are bounded by.
 *  12. Memory (INVALID_ARGUMENT), for each output in the order o, lse (forward) or dq, dk, dv, dsink
 *      (backward):
 *      a. an output tensor does not overlap itself: sort its dimensions of extent > 1 (batch when fixed
 *         length, seq, head, and the contiguous D or Dv) by stride; each stride must exceed the largest
 *         offset the dimensions before it reach, the sum of (extent - 1) * stride over them;
 *      b. its byte span [first byte, last byte] does not intersect the span of any input (q, k, v; backward
 *         also o, dout, lse; varlen also the batch + 1 entries of cu_seqlens_q and cu_seqlens_k; paged also
 *         block_table, as in 11b; when set, sink and seqused_q / seqused_k), nor that of an output before it.
 *         Inputs may share memory with each other (views of one packed qkv tensor). lse spans
 *         rows_q * heads_q floats, dsink heads_q floats.
 * The workspace is checked by flash4_bwd itself (size, alignment), after these rules.
 *
 * How valid params are read: head_dim_v = 0 reads as head_dim; causal = 1 sets window_right = 0; varlen
 * max_seqlen_q / max_seqlen_k are lowered to total_q / total_k when larger (no sequence is longer than all
 * rows); a window edge that reaches past every key (window_left >= Lk) or query (window_right >= Lq, without
 * causal) is unbounded (-1). None of these changes which keys a query sees.
 */
#ifndef FLASH4_FLASH4_H
#define FLASH4_FLASH4_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define FLASH4_API __declspec(dllexport)
#else
#define FLASH4_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct CUstream_st* flash4_stream_t; /* the same type as cudaStream_t; NULL is the legacy stream */

typedef enum flash4_status {
  FLASH4_SUCCESS = 0,
  FLASH4_ERROR_INVALID_STRUCT_SIZE = 1, /* params.struct_size is not one this library knows */
  FLASH4_ERROR_NULL_POINTER = 2,        /* a required pointer is NULL */
  FLASH4_ERROR_UNSUPPORTED_DTYPE = 3,   /* dtype is not bf16 or fp16 (one this build lacks: NO_KERNEL) */
  FLASH4_ERROR_UNSUPPORTED_HEAD_DIM = 4,/* head_dim or head_dim_v not a multiple of 8 in [8, 256] */
  FLASH4_ERROR_HEAD_RATIO = 5,          /* heads_q is not a multiple of heads_kv */
  FLASH4_ERROR_MISALIGNED = 6,          /* a pointer or stride breaks the 16-byte alignment TMA needs (4 bytes for the int32 / fp32 arrays) */
  FLASH4_ERROR_INVALID_SIZE = 7,        /* a negative or zero size where a positive one is required */
  FLASH4_ERROR_INVALID_MASK = 8,        /* window/causal values that contradict each other */
  FLASH4_ERROR_INVALID_VARLEN = 9,      /* cu_seqlens / max_seqlen inconsistent with the other sizes */
  FLASH4_ERROR_SIZE_OVERFLOW = 10,      /* a size or offset past the limits of validation rule 11 */
  FLASH4_ERROR_INVALID_ARGUMENT = 11,   /* any other bad value (scale, softcap, workspace, overlapping outputs) */
  FLASH4_ERROR_NO_KERNEL = 12,          /* a valid request this build has no kernel for (message says which) */
  FLASH4_ERROR_NO_DEVICE = 13,          /* no CUDA device, or the device is not sm_90 */
  FLASH4_ERROR_CUDA = 14,               /* a CUDA runtime/driver call failed (message has its text) */
  FLASH4_ERROR_NOT_IMPLEMENTED = 15,    /* reserved: no entry point of this release returns it */
  FLASH4_ERROR_INTERNAL = 16            /* an unexpected failure inside the library (out of host memory, a bug) */
} flash4_status;

/* Size limits of validation rule 11 (above). */
#define FLASH4_MAX_SEQLEN (1 << 29)
#define FLASH4_MAX_BLOCKS (1 << 30)
#define FLASH4_BLOCK_ROWS 64 /* the row block FLASH4_MAX_BLOCKS counts */

typedef enum flash4_dtype {
  FLASH4_DTYPE_BF16 = 0,
  FLASH4_DTYPE_FP16 = 1
} flash4_dtype;

/* Element strides of one 4-D tensor (batch, seq, head, dim=1 implied). */
typedef struct flash4_strides {
  int64_t batch;
  int64_t seq;
  int64_t head;
} flash4_strides;

typedef struct flash4_fwd_params {
  size_t struct_size; /* sizeof(flash4_fwd_params) as the caller compiled it */
  flash4_dtype dtype; /* read as an int32: any value is safe to pass, and only 0 and 1 are accepted */

  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse; /* optional (NULL: not written) */
  flash4_strides q_strides, k_strides, v_strides, o_strides;

  int32_t batch;
  int32_t seqlen_q;
  int32_t seqlen_k;
  int32_t heads_q;
  int32_t heads_kv;
  int32_t head_dim;

  float softmax_scale; /* > 0; the usual value is 1/sqrt(head_dim) */
  int32_t causal;      /* 0 or 1; 1 sets the right window edge to 0 */
  int32_t window_left; /* -1: unbounded */
  int32_t window_right;/* -1: unbounded; ignored (0) with causal = 1 */
  float softcap;       /* 0: off */

  /* Varlen: device arrays of batch+1 int32 offsets, both set or both NULL. max_seqlen_* bound every
   * sequence (used to size the grid and the workspaces; lowered to total_q / total_k when larger);
   * seqlen_q/seqlen_k are then ignored.
   * The offsets live on the device, so the library cannot check them: a sequence longer than its
   * max_seqlen, or offsets that are not monotone, give undefined results (the Python front end checks
   * them in eager mode). */
  const int32_t* cu_seqlens_q;
  const int32_t* cu_seqlens_k;
  int32_t max_seqlen_q;
  int32_t max_seqlen_k;
  int32_t total_q; /* rows of q/o in varlen mode (cu_seqlens_q[batch]) */
  int32_t total_k; /* rows of k/v in varlen mode */

  void* workspace; /* device memory of at least flash4_fwd_workspace_size() bytes, or NULL if that is 0 */
  size_t workspace_bytes;
  int32_t head_dim_v; /* 0: equal to head_dim */

  /* Paged K/V (prefill against a paged KV cache, FlashAttention's block_table). NULL: k/v are as above.
   * Set: k and v are (num_pages, page_size, heads_kv, D / Dv), k_strides.batch / v_strides.batch being the
   * page strides, and key t of sequence b lives in page block_table[b * block_table_stride + t / page_size],
   * row t % page_size. Sequence b has seqlen_k keys (fixed length) or cu_seqlens_k[b+1] - cu_seqlens_k[b]
   * (varlen: cu_seqlens_k then gives lengths only, and total_k is not rows of k/v but their sum or any bound
   * above it, such as batch * max_seqlen_k: a caller need not read cu_seqlens_k back). page_size is
   * a multiple of 16; block_table is an int32 device array of batch rows, each holding at least
   * ceil(Lk / page_size) entries (Lk: seqlen_k, or min(max_seqlen_k, total_k) for varlen).
   * The entries live on the device, so the library cannot check them: an entry outside [0, num_pages) is
   * never dereferenced and its keys read as zeros (K = V = 0: they score 0, count in the softmax's sum and
   * add nothing to O), so such a row's output is defined but wrong. Cache rows of a sequence's last page
   * past its length are read and masked: they must hold finite values (a NaN there reaches O as 0 * NaN;
   * a cache allocated zeroed, or holding earlier sequences' keys, does). flash4_bwd has no paged form
   * (paged caches are for inference).
   * Callers of the layout without these fields (struct_size of that release) read as NULL. */
  const int32_t* block_table;
  int64_t block_table_stride; /* elements between the rows of consecutive sequences */
  int32_t page_size;
  int32_t num_pages;

  /* Fields appended after the first layout: a caller of an older layout (smaller struct_size) reads as
   * NULL here. */
  const float* sink;          /* optional device array of heads_q fp32 logits: learnable attention sinks */
  const int32_t* seqused_q;   /* optional device array of batch int32: query rows each sequence uses */
  const int32_t* seqused_k;   /* optional device array of batch int32: key rows each sequence uses */
} flash4_fwd_params;

typedef struct flash4_bwd_params {
  size_t struct_size;
  flash4_dtype dtype;

  const void* q;
  const void* k;
  const void* v;
  const void* o;
  const void* dout;
  const float* lse; /* as written by flash4_fwd */
  void* dq;
  void* dk;
  void* dv;
  flash4_strides q_strides, k_strides, v_strides, o_strides, dout_strides, dq_strides, dk_strides, dv_strides;

  int32_t batch;
  int32_t seqlen_q;
  int32_t seqlen_k;
  int32_t heads_q;
  int32_t heads_kv;
  int32_t head_dim;

  float softmax_scale;
  int32_t causal;
  int32_t window_left;
  int32_t window_right;
  float softcap;
  int32_t deterministic; /* 1: bit-identical gradients across runs */

  const int32_t* cu_seqlens_q;
  const int32_t* cu_seqlens_k;
  int32_t max_seqlen_q;
  int32_t max_seqlen_k;
  int32_t total_q;
  int32_t total_k;

  void* workspace;
  size_t workspace_bytes;
  int32_t head_dim_v; /* 0: equal to head_dim */

  /* Appended after the first layout (NULL for a caller of the older one). */
  const float* sink;          /* as in the forward, which must have had the same sinks */
  float* dsink;               /* heads_q fp32: d(loss)/d(sink); required when sink is set */
  const int32_t* seqused_q;
  const int32_t* seqused_k;
} flash4_bwd_params;

/* Library version as major * 10000 + minor * 100 + patch, and as text. */
FLASH4_API int flash4_version(void);
FLASH4_API const char* flash4_version_string(void);

/* Static text for a status code. */
FLASH4_API const char* flash4_status_string(flash4_status status);
/* The message of the last failing call on this thread (names the argument); "" after a success. */
FLASH4_API const char* flash4_last_error_message(void);

/* Validate params without launching anything. */
FLASH4_API flash4_status flash4_fwd_check(const flash4_fwd_params* params);
/* Device workspace the call needs, in bytes (validates params first); flash4_fwd refuses a smaller one
 * (FLASH4_ERROR_INVALID_ARGUMENT) and one not 256-byte aligned (FLASH4_ERROR_MISALIGNED), and initializes what
 * it reads of it on the stream. 0 when the tiles all cost the same (fixed length, no mask, no seqused); one
 * 256-byte block (the tile counter) for other fixed-length calls; varlen adds the list of the tiles that
 * hold query rows, which a small kernel writes on the stream before the forward (the host never reads
 * cu_seqlens): a few bytes per sequence and per 64 rows of total_q, and per 64 rows of max_seqlen_q. */
FLASH4_API flash4_status flash4_fwd_workspace_size(const flash4_fwd_params* params, size_t* bytes);
/* Enqueue the forward on `stream`. Asynchronous: returns once the work is launched. */
FLASH4_API flash4_status flash4_fwd(const flash4_fwd_params* params, flash4_stream_t stream);

FLASH4_API flash4_status flash4_bwd_check(const flash4_bwd_params* params);
/* The backward's device workspace: at least this many bytes, 256-byte aligned (cudaMalloc's alignment).
 * A smaller one is FLASH4_ERROR_INVALID_ARGUMENT, a misaligned one FLASH4_ERROR_MISALIGNED. It holds an
 * fp32 dQ accumulator (4 bytes x heads_q x the serving kernel's head dim per padded query row);
 * deterministic = 1 needs up to 4 of them, so size the workspace with the same `deterministic` value as the
 * launch. */
FLASH4_API flash4_status flash4_bwd_workspace_size(const flash4_bwd_params* params, size_t* bytes);
FLASH4_API flash4_status flash4_bwd(const flash4_bwd_params* params, flash4_stream_t stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

/* Attention against a KV cache (decoding): flash4_kvcache_params and flash4_kvcache*(). */
#include "flash4/flash4_kvcache.h"

#endif /* FLASH4_FLASH4_H */
