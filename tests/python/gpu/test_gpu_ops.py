"""flash4's torch ops on the GPU (H200): results, gradients, torch.compile, CUDA graphs, strided inputs.

Tolerance rule (as tests/tolerance.hpp): flash4's max error against an fp32 reference must be at most
twice the error of a naive same-precision implementation (bf16/fp16 inputs, fp32 accumulate, P rounded to
the input dtype) plus a small floor. The reference is an explicit fp32 computation, itself checked against
torch's math SDPA in fp32 (explicit, because it must also cover softcap, which SDPA lacks).

Skipped without a CUDA device. With one, the library must load (FLASH4_LIBRARY or the installed package):
a missing library fails rather than skips. Gradient tests skip, naming the reason, while flash4_bwd
reports FLASH4_ERROR_NOT_IMPLEMENTED; a test then checks that autograd says so.
"""

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from flash4 import Flash4Error, Flash4NotImplementedError, _abi, _launch, flash_attn_func, flash_attn_varlen_func
from naive_backward import naive_backward

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

BF16, FP16 = torch.bfloat16, torch.float16
# Floors of the tolerance rule: O and gradients are O(1) for unit-normal inputs, so 1e-4 is rounding noise;
# LSE gets 1e-3 because the kernels compute part of exp2 with a polynomial accurate to bf16 (DESIGN.md section 3),
# which the fp32 row sum of the naive implementation does not model.
FLOOR = 1e-4
LSE_FLOOR = 1e-3
# Statuses that mean "this case was not built" (CMake's FLASH4_HEAD_DIMS / FLASH4_DTYPES cut the set).
NOT_BUILT = {_abi.Status.ERROR_NO_KERNEL, _abi.Status.ERROR_UNSUPPORTED_HEAD_DIM, _abi.Status.ERROR_UNSUPPORTED_DTYPE}


@pytest.fixture(scope="module", autouse=True)
def hopper():
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip(f"flash4's kernels need sm_90 (Hopper); this is {torch.cuda.get_device_name()}")


@pytest.fixture(scope="module")
def backward_missing():
    """The library's message when its backward is not implemented, else None."""
    q = torch.randn(1, 128, 1, 64, dtype=BF16, device="cuda", requires_grad=True)
    try:
        run(flash_attn_func, q, q.detach(), q.detach()).sum().backward()
    except Flash4NotImplementedError as err:
        return str(err)
    return None


@pytest.fixture
def needs_backward(backward_missing):
    if backward_missing:
        pytest.skip(f"the library reports no backward yet: {backward_missing}")


def run(function, *args, **kwargs):
    """Call a flash4 function; skip the test when the library was built without this case."""
    try:
        return function(*args, **kwargs)
    except Flash4Error as err:
        if err.status in NOT_BUILT:
            pytest.skip(f"not in this build: {err}")
        raise


def randn(*shape, dtype=BF16, requires_grad=False):
    return torch.randn(*shape, dtype=dtype, device="cuda", requires_grad=requires_grad)


def keep_mask(seqlen_q, seqlen_k, causal, window):
    """(Sq, Sk) bool: which keys each query sees, bottom-right aligned as in flash4.h."""
    left, right = window
    if causal:
        right = 0
    row = torch.arange(seqlen_q, device="cuda")[:, None] + (seqlen_k - seqlen_q)
    col = torch.arange(seqlen_k, device="cuda")[None, :]
    keep = torch.ones(seqlen_q, seqlen_k, dtype=torch.bool, device="cuda")
    if left >= 0:
        keep &= col >= row - left
    if right >= 0:
        keep &= col <= row + right
    return keep


def attention(q, k, v, scale, keep, softcap=0.0, precise=True):
    """(out (B, Sq, Hq, D), lse (B, Hq, Sq)) computed by torch from (B, S, H, D) inputs.

    precise: fp32 throughout (the reference). Otherwise the naive same-precision computation of the
    tolerance rule: fp32 scores of the low-precision inputs, P rounded to their dtype, fp32 accumulate,
    output rounded. Differentiable either way.
    """
    dtype = q.dtype
    groups = q.shape[2] // k.shape[2]
    k, v = (t.repeat_interleave(groups, dim=2) for t in (k, v))
    q, k, v = (t.float().transpose(1, 2) for t in (q, k, v))
    scores = q @ k.transpose(-1, -2) * scale
    if softcap:
        scores = softcap * torch.tanh(scores / softcap)
    scores = scores.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    # Fully masked rows: softmax gives NaN there; flash4 defines O = 0 (and LSE = -inf, as logsumexp gives).
    p = torch.softmax(scores, dim=-1).masked_fill(~keep, 0.0)
    if not precise:
        p = p.to(dtype).float()
    out = (p @ v).transpose(1, 2)
    return (out if precise else out.to(dtype)), lse


def assert_within_rule(name, got, ref, naive, floor=FLOOR):
    got, ref, naive = (t.detach().float() for t in (got, ref, naive))
    finite = torch.isfinite(ref)
    assert torch.equal(got[~finite], ref[~finite]), f"{name}: wrong values where the reference is infinite"
    if not finite.any():
        return
    assert torch.isfinite(got[finite]).all(), f"{name}: non-finite values"
    error = (got - ref)[finite].abs().max().item()
    naive_error = (naive - ref)[finite].abs().max().item()
    assert error <= 2 * naive_error + floor, f"{name}: max error {error:.3g} > 2 x naive {naive_error:.3g} + {floor}"


def check_forward(q, k, v, causal=False, window=(-1, -1), softcap=0.0, softmax_scale=None):
    out, lse = run(flash_attn_func, q, k, v, softmax_scale=softmax_scale, causal=causal, window_size=window,
                   softcap=softcap, return_lse=True)
    scale = softmax_scale or q.shape[-1] ** -0.5
    keep = keep_mask(q.shape[1], k.shape[1], causal, window)
    ref_out, ref_lse = attention(q, k, v, scale, keep, softcap)
    naive_out, naive_lse = attention(q, k, v, scale, keep, softcap, precise=False)
    assert out.shape == q.shape and out.dtype == q.dtype and lse.shape == (q.shape[0], q.shape[2], q.shape[1])
    assert_within_rule("out", out, ref_out, naive_out)
    assert_within_rule("lse", lse, ref_lse, naive_lse, LSE_FLOOR)


def test_reference_matches_math_sdpa():
    q, k, v = randn(2, 77, 4, 64), randn(2, 77, 4, 64), randn(2, 77, 4, 64)
    keep = keep_mask(77, 77, causal=True, window=(-1, -1))
    with sdpa_kernel(SDPBackend.MATH):
        sdpa = F.scaled_dot_product_attention(*(t.float().transpose(1, 2) for t in (q, k, v)), attn_mask=keep)
    torch.testing.assert_close(attention(q, k, v, 64**-0.5, keep)[0], sdpa.transpose(1, 2), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("head_dim", [64, 96, 128, 192, 256])
@pytest.mark.parametrize("dtype", [BF16, FP16])
@pytest.mark.parametrize("causal", [False, True])
def test_forward_head_dims_and_dtypes(head_dim, dtype, causal):
    check_forward(randn(2, 239, 4, head_dim, dtype=dtype), randn(2, 239, 2, head_dim, dtype=dtype),
                  randn(2, 239, 2, head_dim, dtype=dtype), causal=causal)


@pytest.mark.parametrize("seqlen_q, seqlen_k", [(1, 1), (17, 17), (113, 203), (239, 1), (799, 3), (1023, 1024),
                                                (4224, 4224), (128, 64)])  # (128, 64) causal: 64 fully masked rows
@pytest.mark.parametrize("causal", [False, True])
def test_forward_odd_sizes(seqlen_q, seqlen_k, causal):
    check_forward(randn(1, seqlen_q, 8, 128), randn(1, seqlen_k, 8, 128), randn(1, seqlen_k, 8, 128), causal=causal)


@pytest.mark.parametrize("heads_kv", [8, 2, 1])  # MHA, GQA, MQA
@pytest.mark.parametrize("head_dim", [64, 128])
def test_forward_gqa_mqa(heads_kv, head_dim):
    check_forward(randn(2, 300, 8, head_dim), randn(2, 300, heads_kv, head_dim), randn(2, 300, heads_kv, head_dim),
                  causal=True)


@pytest.mark.parametrize("causal, window, softcap, softmax_scale", [
    (False, (64, 64), 0.0, None),
    (True, (100, -1), 0.0, None),
    (False, (-1, 0), 0.0, 0.3),
    (False, (-1, -1), 30.0, None),
    (True, (32, 0), 15.0, 0.2),
    (False, (0, 0), 0.0, None),
])
def test_forward_windows_softcap_scale(causal, window, softcap, softmax_scale):
    check_forward(randn(2, 333, 4, 128), randn(2, 400, 4, 128), randn(2, 400, 4, 128), causal=causal,
                  window=window, softcap=softcap, softmax_scale=softmax_scale)


def varlen_inputs(lengths_q, lengths_k, heads_q=8, heads_kv=2, head_dim=128, requires_grad=False):
    cu_q = torch.tensor([0, *lengths_q], device="cuda").cumsum(0).to(torch.int32)
    cu_k = torch.tensor([0, *lengths_k], device="cuda").cumsum(0).to(torch.int32)
    q = randn(sum(lengths_q), heads_q, head_dim, requires_grad=requires_grad)
    k, v = (randn(sum(lengths_k), heads_kv, head_dim, requires_grad=requires_grad) for _ in "kv")
    return q, k, v, cu_q, cu_k


def varlen_attention(q, k, v, cu_q, cu_k, causal, precise=True):
    """Per-sequence attention() of packed inputs: (out (total_q, Hq, D), lse (Hq, total_q))."""
    outs, lses = [], []
    for (start_q, end_q), (start_k, end_k) in zip(zip(cu_q.tolist(), cu_q.tolist()[1:]),
                                                  zip(cu_k.tolist(), cu_k.tolist()[1:])):
        keep = keep_mask(end_q - start_q, end_k - start_k, causal, (-1, -1))
        out, lse = attention(q[None, start_q:end_q], k[None, start_k:end_k], v[None, start_k:end_k],
                             q.shape[-1] ** -0.5, keep, precise=precise)
        outs.append(out[0])
        lses.append(lse[0])
    return torch.cat(outs), torch.cat(lses, dim=1)


def varlen_naive_backward(dout, q, k, v, cu_q, cu_k, causal):
    """Per-sequence naive_backward of packed inputs: (dq, dk, dv) like (q, k, v), zero where nothing flows."""
    grads = [torch.zeros_like(t) for t in (q, k, v)]
    scale = q.shape[-1] ** -0.5
    for (start_q, end_q), (start_k, end_k) in zip(zip(cu_q.tolist(), cu_q.tolist()[1:]),
                                                  zip(cu_k.tolist(), cu_k.tolist()[1:])):
        rows, keys = slice(start_q, end_q), slice(start_k, end_k)
        q_b, dout_b = q[None, rows], dout[None, rows]
        k_b, v_b = k[None, keys], v[None, keys]
        keep = keep_mask(end_q - start_q, end_k - start_k, causal, (-1, -1))
        out, lse = attention(q_b, k_b, v_b, scale, keep, precise=False)
        dq, dk, dv = naive_backward(dout_b, q_b, k_b, v_b, out, lse, keep, scale)
        grads[0][rows], grads[1][keys], grads[2][keys] = dq[0], dk[0], dv[0]
    return grads


@pytest.mark.parametrize("causal", [False, True])
def test_varlen_forward(causal):
    lengths_q, lengths_k = [5, 0, 300, 1, 129], [0, 7, 200, 64, 129]  # empty sequences on either side
    q, k, v, cu_q, cu_k = varlen_inputs(lengths_q, lengths_k)
    out, lse = run(flash_attn_varlen_func, q, k, v, cu_q, cu_k, max(lengths_q), max(lengths_k), causal=causal,
                   return_lse=True)
    assert out.shape == q.shape and lse.shape == (8, q.shape[0])
    ref_out, ref_lse = varlen_attention(q, k, v, cu_q, cu_k, causal)
    naive_out, naive_lse = varlen_attention(q, k, v, cu_q, cu_k, causal, precise=False)
    assert_within_rule("out", out, ref_out, naive_out)
    assert_within_rule("lse", lse, ref_lse, naive_lse, LSE_FLOOR)


def test_varlen_offsets_are_checked_when_a_bound_is_missing():
    # With both bounds given nothing is read back (no wait on the stream); a None bound reads and checks the offsets.
    q, k, v, cu_q, cu_k = varlen_inputs([10, 20], [10, 20])
    with pytest.raises(ValueError, match="max_seqlen_q = 10 but the longest sequence in cu_seqlens_q has 20 rows"):
        flash_attn_varlen_func(q, k, v, cu_q, cu_k, 10, None)
    decreasing = torch.tensor([0, 31, 30], dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match=r"cu_seqlens_k must be non-decreasing, but cu_seqlens_k\[2\] = 30 < "):
        flash_attn_varlen_func(q, k, v, cu_q, decreasing, None, None)
    out = run(flash_attn_varlen_func, q, k, v, cu_q, cu_k, None, None)  # the bounds taken from the offsets
    assert torch.equal(out, run(flash_attn_varlen_func, q, k, v, cu_q, cu_k, 20, 20))


def test_strided_views_of_packed_qkv_match_packed_inputs():
    qkv = randn(2, 257, 3, 8, 128)  # a fused projection's output, (B, S, 3, H, D)
    q, k, v = qkv.unbind(2)
    assert not q.is_contiguous()
    packed = run(flash_attn_func, *(t.contiguous() for t in (q, k, v)), causal=True)
    assert torch.equal(run(flash_attn_func, q, k, v, causal=True), packed)


def test_misaligned_views_are_copied_not_refused():
    wide = randn(2, 100, 4, 128 + 4)
    q = wide[..., 4:]  # base 8 bytes off a 16-byte boundary, strides not 16-byte multiples
    k, v = randn(2, 100, 4, 128), randn(2, 100, 4, 128)
    assert torch.equal(run(flash_attn_func, q, k, v), run(flash_attn_func, q.contiguous(), k, v))


def test_a_strided_last_dimension_is_copied_with_gradients_to_the_original(needs_backward):
    # FlashAttention copies such a q, k or v (maybe_contiguous); so does flash4, eagerly and through the ops.
    bases = [randn(2, 100, 4, 128, requires_grad=True) for _ in "qkv"]
    strided = [base[..., ::2] for base in bases]
    packed = [base.detach()[..., ::2].contiguous().requires_grad_() for base in bases]
    out = run(flash_attn_func, *strided, causal=True, deterministic=True)
    expected = run(flash_attn_func, *packed, causal=True, deterministic=True)
    assert torch.equal(out, expected)
    dout = torch.randn_like(out)
    for function in (flash_attn_func, torch.compile(flash_attn_func, fullgraph=True)):  # eager path, then the ops
        out = function(*(base[..., ::2] for base in bases), causal=True, deterministic=True)
        got = torch.autograd.grad(out, bases, dout)
        want = torch.autograd.grad(expected, packed, dout, retain_graph=True)
        for name, g, w in zip("qkv", got, want):
            assert not g[..., 1::2].any(), f"d{name} has values where no input was read"
            assert torch.equal(g[..., ::2], w), f"d{name}"


def test_any_negative_window_edge_is_unbounded():
    # FlashAttention-2/-3 read every negative edge as unbounded; flash4 passes -1 to its C ABI.
    q, k, v = randn(2, 100, 4, 64), randn(2, 130, 4, 64), randn(2, 130, 4, 64)
    for causal in (False, True):
        expected = run(flash_attn_func, q, k, v, causal=causal, window_size=(-1, 7))
        assert torch.equal(run(flash_attn_func, q, k, v, causal=causal, window_size=(-5, 7)), expected)
        expected = run(flash_attn_func, q, k, v, causal=causal)
        assert torch.equal(run(flash_attn_func, q, k, v, causal=causal, window_size=(-2, -100)), expected)


def test_runs_on_the_current_stream():
    q, k, v = randn(2, 1024, 8, 128), randn(2, 1024, 8, 128), randn(2, 1024, 8, 128)
    expected = run(flash_attn_func, q, k, v)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        out = flash_attn_func(q, k, v)
    torch.cuda.current_stream().wait_stream(stream)
    assert torch.equal(out, expected)


def test_c_abi_errors_come_through_with_their_message():
    q = randn(1, 64, 4, 64)
    # flash4._launch skips the Python checks (the ops and the public functions run them first); the library's
    # validation answers instead.
    options = _launch.Options(-1.0, False, -1, -1, 0.0, False)
    with pytest.raises(Flash4Error, match="FLASH4_ERROR_INVALID_ARGUMENT.*softmax_scale") as info:
        _launch.forward(q, q, q, options)
    assert info.value.status == _abi.Status.ERROR_INVALID_ARGUMENT


def test_opcheck_forward_ops():
    q, k, v = randn(2, 128, 8, 64), randn(2, 96, 2, 64), randn(2, 96, 2, 64)
    torch.library.opcheck(torch.ops.flash4.fwd.default, (q, k, v, 0.125, True, -1, 0, 0.0, False))
    q, k, v, cu_q, cu_k = varlen_inputs([33, 0, 70], [40, 9, 70])
    torch.library.opcheck(torch.ops.flash4.varlen_fwd.default,
                          (q, k, v, cu_q, cu_k, 70, 70, 128**-0.5, False, -1, -1, 0.0, False))


def test_opcheck_with_autograd(needs_backward):
    q, k, v = (randn(2, 128, 4, 64, requires_grad=True) for _ in "qkv")
    torch.library.opcheck(torch.ops.flash4.fwd.default, (q, k, v, 0.125, False, -1, -1, 0.0, False))
    out, lse = torch.ops.flash4.fwd(q, k, v, 0.125, False, -1, -1, 0.0, False)
    dout = torch.randn_like(out)
    saved = [t.detach() for t in (q, k, v, out)]
    torch.library.opcheck(torch.ops.flash4.bwd.default, (dout, *saved, lse, 0.125, False, -1, -1, 0.0, False, None))


class Attention(torch.nn.Module):
    """Self-attention over a fused projection, so the compiled graph holds views, the op and a projection."""

    def __init__(self, dim=512, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(dim, 3 * dim, dtype=BF16, device="cuda")
        self.proj = torch.nn.Linear(dim, dim, dtype=BF16, device="cuda")

    def forward(self, x):
        batch, seqlen, dim = x.shape
        q, k, v = self.qkv(x).view(batch, seqlen, 3, self.heads, dim // self.heads).unbind(2)
        return self.proj(flash_attn_func(q, k, v, causal=True).reshape(batch, seqlen, dim))


@pytest.mark.parametrize("dynamic", [False, True])
def test_torch_compile_fullgraph(dynamic):
    torch._dynamo.reset()
    module = Attention()
    compiled = torch.compile(module, fullgraph=True, dynamic=dynamic)  # fullgraph: a graph break is an error
    with torch.no_grad():
        for seqlen in (256, 384):
            x = randn(2, seqlen, 512)
            torch.testing.assert_close(compiled(x), module(x), rtol=2e-2, atol=2e-2)


def test_torch_compile_backward(needs_backward):
    torch._dynamo.reset()
    module = Attention()
    x = randn(2, 256, 512, requires_grad=True)
    torch.compile(module, fullgraph=True)(x).sum().backward()
    compiled_grad, x.grad = x.grad, None
    module(x).sum().backward()
    torch.testing.assert_close(compiled_grad, x.grad, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("varlen", [False, True])
def test_cuda_graph_capture_and_replay(varlen):
    if varlen:
        q, k, v, cu_q, cu_k = varlen_inputs([100, 0, 257], [64, 30, 257])

        def attend(q, k, v):
            return flash_attn_varlen_func(q, k, v, cu_q, cu_k, 257, 257, causal=True)
    else:
        q, k, v = randn(2, 300, 8, 128), randn(2, 300, 2, 128), randn(2, 300, 2, 128)

        def attend(q, k, v):
            return flash_attn_func(q, k, v, causal=True)

    static = [t.clone() for t in (q, k, v)]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the capture: opens the library, fills the allocator's pools
        run(attend, *static)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = attend(*static)
    fresh = [torch.randn_like(t) for t in static]
    for target, source in zip(static, fresh):
        target.copy_(source)
    graph.replay()
    assert torch.equal(out, attend(*fresh))


def test_the_forward_workspace_kept_per_stream_serves_overlapping_streams_and_graphs():
    """Causal with more tiles than SMs: the forward claims its tiles from a counter in its workspace, which
    flash4._launch keeps per stream for eager calls and allocates apart under graph capture. Eager calls on two
    streams, and a graph's replays overlapping eager calls on its capture stream, each get every tile once."""
    q, k, v = randn(4, 2048, 8, 128), randn(4, 2048, 8, 128), randn(4, 2048, 8, 128)
    expected = run(flash_attn_func, q, k, v, causal=True)
    streams = [torch.cuda.Stream() for _ in range(2)]
    outs = []
    for stream in streams:
        stream.wait_stream(torch.cuda.current_stream())
    for _ in range(3):
        for stream in streams:
            with torch.cuda.stream(stream):
                outs.append(flash_attn_func(q, k, v, causal=True))
    for stream in streams:
        torch.cuda.current_stream().wait_stream(stream)
    capture = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=capture):
        captured = flash_attn_func(q, k, v, causal=True)
    capture.wait_stream(torch.cuda.current_stream())
    for _ in range(3):
        graph.replay()
        with torch.cuda.stream(capture):
            outs.append(flash_attn_func(q, k, v, causal=True))
    torch.cuda.current_stream().wait_stream(capture)
    for out in outs + [captured]:
        assert torch.equal(out, expected)


def test_the_backward_workspace_kept_per_stream_serves_overlapping_streams():
    """A backward small enough for flash4._launch to keep its workspace per stream, on two streams at once:
    each call's preprocess initializes what its kernels read there, so every gradient is the one computed
    alone (deterministic mode: bit for bit)."""
    q, k, v = (randn(2, 256, 4, 128, requires_grad=True) for _ in "qkv")
    dout = randn(2, 256, 4, 128)

    def gradients():
        return torch.autograd.grad(flash_attn_func(q, k, v, causal=True, deterministic=True), (q, k, v), dout)

    expected = run(gradients)
    streams = [torch.cuda.Stream() for _ in range(2)]
    for stream in streams:
        stream.wait_stream(torch.cuda.current_stream())
    results = []
    for _ in range(3):
        for stream in streams:
            with torch.cuda.stream(stream):
                results.append(gradients())
    for stream in streams:
        torch.cuda.current_stream().wait_stream(stream)
    for grads in results:
        for got, want in zip(grads, expected):
            assert torch.equal(got, want)


def test_backward_reports_that_it_is_missing(backward_missing):
    if not backward_missing:
        pytest.skip("the library implements the backward")
    q, k, v = (randn(1, 64, 2, 64, requires_grad=True) for _ in "qkv")
    with pytest.raises(Flash4NotImplementedError, match="flash4_bwd failed with FLASH4_ERROR_NOT_IMPLEMENTED"):
        flash_attn_func(q, k, v).sum().backward()


def check_gradients(q, k, v, causal=False, window=(-1, -1), softcap=0.0, deterministic=False):
    dout = torch.randn_like(q)
    out = run(flash_attn_func, q, k, v, causal=causal, window_size=window, softcap=softcap,
              deterministic=deterministic)
    grads = run(torch.autograd.grad, out, (q, k, v), dout)
    keep = keep_mask(q.shape[1], k.shape[1], causal, window)
    scale = q.shape[-1] ** -0.5
    ref_inputs = [t.detach().float().requires_grad_() for t in (q, k, v)]
    ref_grads = torch.autograd.grad(attention(*ref_inputs, scale, keep, softcap)[0], ref_inputs, dout.float())
    naive_out, naive_lse = attention(q, k, v, scale, keep, softcap, precise=False)
    naive_grads = naive_backward(dout, q, k, v, naive_out, naive_lse, keep, scale, softcap)
    for name, got, ref, naive in zip(("dq", "dk", "dv"), grads, ref_grads, naive_grads):
        assert got.shape == ref.shape and got.dtype == q.dtype
        assert_within_rule(name, got, ref, naive)
    return grads


@pytest.mark.parametrize("head_dim", [64, 96, 128, 192, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_gradients(needs_backward, head_dim, causal):
    q = randn(2, 239, 4, head_dim, requires_grad=True)
    k, v = (randn(2, 311, 2, head_dim, requires_grad=True) for _ in "kv")
    check_gradients(q, k, v, causal=causal)


@pytest.mark.parametrize("seqlen_q, seqlen_k", [(1, 1), (113, 203), (799, 3), (1023, 1024)])
@pytest.mark.parametrize("heads_kv", [8, 1])
def test_gradients_sizes_gqa_mqa(needs_backward, seqlen_q, seqlen_k, heads_kv):
    k, v = (randn(1, seqlen_k, heads_kv, 128, requires_grad=True) for _ in "kv")
    check_gradients(randn(1, seqlen_q, 8, 128, requires_grad=True), k, v, causal=True)


def test_gradients_window_softcap(needs_backward):
    check_gradients(*(randn(2, 300, 4, 128, requires_grad=True) for _ in "qkv"), window=(64, 16), softcap=20.0)


def test_deterministic_gradients_are_bit_identical(needs_backward):
    q, k, v = (randn(2, 2048, 8, 128, requires_grad=True) for _ in "qkv")
    dout = torch.randn_like(q)

    def gradients():
        out = run(flash_attn_func, q, k, v, causal=True, deterministic=True)
        return torch.autograd.grad(out, (q, k, v), dout)

    first, second = gradients(), gradients()
    assert all(torch.equal(a, b) for a, b in zip(first, second))


def test_varlen_gradients(needs_backward):
    q, k, v, cu_q, cu_k = varlen_inputs([5, 0, 300, 129], [9, 7, 200, 129], requires_grad=True)
    dout = torch.randn_like(q)
    out = run(flash_attn_varlen_func, q, k, v, cu_q, cu_k, 300, 200, causal=True)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    ref_inputs = [t.detach().float().requires_grad_() for t in (q, k, v)]
    ref_grads = torch.autograd.grad(varlen_attention(*ref_inputs, cu_q, cu_k, True)[0], ref_inputs, dout.float())
    naive_grads = varlen_naive_backward(dout, q, k, v, cu_q, cu_k, True)
    for name, got, ref, naive in zip(("dq", "dk", "dv"), grads, ref_grads, naive_grads):
        assert_within_rule(name, got, ref, naive)
