"""FlashAttention's call forms on the GPU (H200): every form against the fp32 reference, the eager path against
the torch ops, empty problems, local causal windows, and what the eager path must never do (wait for the
stream, let go of memory the kernels still read).

Tolerance rule and helpers: tests/python/gpu/test_gpu_ops.py (2 x the error of the naive same-precision
computation + a floor, against an fp32 reference). Outputs are poisoned: inside nan_allocations() every
tensor that torch.empty / torch.empty_like make starts as NaN (or its integer type's largest value), so a value
the library did not write shows up. Skipped without a CUDA
device or on a GPU other than sm_90; a case the library was built without skips with its message.
"""

import contextlib

import pytest
import torch

import flash4
from test_gpu_ops import (  # noqa: F401  (hopper: the module's skip fixture; needs_backward and its source)
    BF16,
    LSE_FLOOR,
    assert_within_rule,
    attention,
    backward_missing,
    hopper,
    keep_mask,
    needs_backward,
    randn,
    run,
    varlen_attention,
)

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


@contextlib.contextmanager
def nan_allocations():
    """Within the block, tensors from torch.empty and torch.empty_like (the library's outputs, gradients and
    workspaces) start poisoned: NaN when floating, the largest value of an integer type (a byte workspace then
    reads as NaN), True when bool. Poisoning what the caching allocator will hand out next is not enough:
    which block it picks differs between PyTorch versions."""
    empty, empty_like = torch.empty, torch.empty_like

    def poison(tensor):
        if tensor.is_floating_point():
            return tensor.fill_(float("nan"))
        return tensor.fill_(True if tensor.dtype == torch.bool else torch.iinfo(tensor.dtype).max)

    torch.empty = lambda *args, **kwargs: poison(empty(*args, **kwargs))
    torch.empty_like = lambda *args, **kwargs: poison(empty_like(*args, **kwargs))
    try:
        yield
    finally:
        torch.empty, torch.empty_like = empty, empty_like


def cu_seqlens(lengths):
    return torch.tensor([0, *lengths], device="cuda").cumsum(0).to(torch.int32)


# ---------------------------------------------------------------- every call form against the reference

# name -> (make(): (inputs requiring grad, split(*inputs) -> (q, k, v), call(*inputs) -> (out, lse), varlen or None))
# varlen: (cu_seqlens_q, cu_seqlens_k). Fixed-length forms are causal with Sq != Sk (bottom-right alignment).
LENGTHS_Q, LENGTHS_K = [37, 0, 200, 129], [50, 9, 200, 1]


def _fixed(q_shape, kv_shape):
    return randn(*q_shape, requires_grad=True), randn(*kv_shape, requires_grad=True)


FORMS = {
    "flash_attn_func": lambda: (
        [randn(2, 177, 8, 128, requires_grad=True), *(randn(2, 203, 2, 128, requires_grad=True) for _ in "kv")],
        lambda q, k, v: (q, k, v),
        lambda q, k, v: flash4.flash_attn_func(q, k, v, causal=True, return_lse=True), None),
    "flash_attn_qkvpacked_func": lambda: (
        [randn(2, 177, 3, 4, 128, requires_grad=True)],
        lambda qkv: qkv.unbind(2),
        lambda qkv: flash4.flash_attn_qkvpacked_func(qkv, causal=True, return_lse=True), None),
    "flash_attn_qkvpacked_func(num_heads_q)": lambda: (
        [randn(2, 177, 8 + 2 * 2, 128, requires_grad=True)],
        lambda qkv: qkv.split((8, 2, 2), dim=2),
        lambda qkv: flash4.flash_attn_qkvpacked_func(qkv, causal=True, num_heads_q=8, return_lse=True), None),
    "flash_attn_kvpacked_func": lambda: (
        list(_fixed((2, 177, 8, 128), (2, 203, 2, 2, 128))),
        lambda q, kv: (q, *kv.unbind(2)),
        lambda q, kv: flash4.flash_attn_kvpacked_func(q, kv, causal=True, return_lse=True), None),
    "flash_attn_varlen_func": lambda: (
        [randn(sum(LENGTHS_Q), 8, 128, requires_grad=True),
         *(randn(sum(LENGTHS_K), 2, 128, requires_grad=True) for _ in "kv")],
        lambda q, k, v: (q, k, v),
        lambda q, k, v: flash4.flash_attn_varlen_func(q, k, v, cu_seqlens(LENGTHS_Q), cu_seqlens(LENGTHS_K),
                                                      max(LENGTHS_Q), max(LENGTHS_K), causal=True, return_lse=True),
        (cu_seqlens(LENGTHS_Q), cu_seqlens(LENGTHS_K))),
    "flash_attn_varlen_qkvpacked_func": lambda: (
        [randn(sum(LENGTHS_Q), 3, 4, 128, requires_grad=True)],
        lambda qkv: qkv.unbind(1),
        lambda qkv: flash4.flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens(LENGTHS_Q), max(LENGTHS_Q), causal=True,
                                                            return_lse=True),
        (cu_seqlens(LENGTHS_Q), cu_seqlens(LENGTHS_Q))),
    "flash_attn_varlen_kvpacked_func": lambda: (
        [randn(sum(LENGTHS_Q), 8, 128, requires_grad=True), randn(sum(LENGTHS_K), 2, 2, 128, requires_grad=True)],
        lambda q, kv: (q, *kv.unbind(1)),
        lambda q, kv: flash4.flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens(LENGTHS_Q), cu_seqlens(LENGTHS_K),
                                                             max(LENGTHS_Q), max(LENGTHS_K), causal=True,
                                                             return_lse=True),
        (cu_seqlens(LENGTHS_Q), cu_seqlens(LENGTHS_K))),
}


def reference(inputs, split, varlen, dout, precise):
    """(out, lse, gradients of `inputs`) of the reference (precise) or the naive computation, by autograd."""
    leaves = [t.detach().float().requires_grad_() if precise else t.detach().clone().requires_grad_() for t in inputs]
    q, k, v = split(*leaves)
    if varlen is None:
        out, lse = attention(q, k, v, q.shape[-1] ** -0.5, keep_mask(q.shape[1], k.shape[1], True, (-1, -1)),
                             precise=precise)
    else:
        out, lse = varlen_attention(q, k, v, *varlen, True, precise=precise)
    grads = torch.autograd.grad(out, leaves, dout.float() if precise else dout)
    return out, lse, grads


@pytest.mark.parametrize("form", FORMS)
def test_call_form_matches_the_reference(needs_backward, form):
    inputs, split, call, varlen = FORMS[form]()
    with nan_allocations():
        out, lse = run(call, *inputs)
    dout = torch.randn_like(out)
    with nan_allocations():
        grads = torch.autograd.grad(out, inputs, dout)
    ref_out, ref_lse, ref_grads = reference(inputs, split, varlen, dout, precise=True)
    naive_out, naive_lse, naive_grads = reference(inputs, split, varlen, dout, precise=False)
    assert out.dtype == BF16 and out.shape == ref_out.shape and lse.shape == ref_lse.shape
    assert_within_rule("out", out, ref_out, naive_out)
    assert_within_rule("lse", lse, ref_lse, naive_lse, LSE_FLOOR)
    for i, (got, ref, naive) in enumerate(zip(grads, ref_grads, naive_grads)):
        assert got.shape == inputs[i].shape and got.dtype == BF16  # a packed input gets one packed gradient
        assert_within_rule(f"grad of input {i}", got, ref, naive)


def test_flash_attn_func_returns_out_alone_as_flash_attention_does():
    q, k, v = (randn(1, 64, 2, 64) for _ in "qkv")
    out = run(flash4.flash_attn_func, q, k, v, 0.0, None, True)  # FlashAttention-2's positional order
    assert isinstance(out, torch.Tensor) and out.shape == q.shape


# ---------------------------------------------------------------- the eager path and the torch ops agree


@pytest.mark.parametrize("varlen", [False, True])
def test_eager_path_and_torch_ops_give_identical_results(needs_backward, varlen):
    # deterministic=True: the two paths launch the same kernels on the same arguments, so equal bits.
    if varlen:
        q, k, v = (randn(sum(lengths), heads, 128, requires_grad=True)
                   for lengths, heads in ((LENGTHS_Q, 8), (LENGTHS_K, 2), (LENGTHS_K, 2)))
        metadata = (cu_seqlens(LENGTHS_Q), cu_seqlens(LENGTHS_K), max(LENGTHS_Q), max(LENGTHS_K))
        eager = run(flash4.flash_attn_varlen_func, q, k, v, *metadata, causal=True, deterministic=True,
                    return_lse=True)
        dispatched = torch.ops.flash4.varlen_fwd(q, k, v, *metadata, 128**-0.5, True, -1, 0, 0.0, True)
    else:
        q, k, v = (randn(2, s, h, 128, requires_grad=True) for s, h in ((177, 8), (203, 2), (203, 2)))
        eager = run(flash4.flash_attn_func, q, k, v, causal=True, deterministic=True, return_lse=True)
        dispatched = torch.ops.flash4.fwd(q, k, v, 128**-0.5, True, -1, 0, 0.0, True)
    assert type(eager[0].grad_fn).__name__ == "_AttentionBackward"  # the eager path, not the op's autograd
    dout = torch.randn_like(eager[0])
    for got, expected in zip(eager, dispatched):
        assert torch.equal(got, expected)
    eager_grads = torch.autograd.grad(eager[0], (q, k, v), dout)
    dispatched_grads = torch.autograd.grad(dispatched[0], (q, k, v), dout)
    for name, got, expected in zip("qkv", eager_grads, dispatched_grads):
        assert torch.equal(got, expected), f"d{name}"


# ---------------------------------------------------------------- masking as FlashAttention defines it


def test_causal_with_a_window_is_local_causal_attention():
    # FlashAttention: causal=True sets the window's right edge to 0 and keeps the left one.
    q, k, v = randn(2, 300, 4, 128), randn(2, 333, 4, 128), randn(2, 333, 4, 128)
    out = run(flash4.flash_attn_func, q, k, v, causal=True, window_size=(64, 17))
    assert torch.equal(out, run(flash4.flash_attn_func, q, k, v, causal=True, window_size=(64, 0)))
    keep = keep_mask(300, 333, causal=False, window=(64, 0))
    ref_out, _ = attention(q, k, v, 128**-0.5, keep)
    naive_out, _ = attention(q, k, v, 128**-0.5, keep, precise=False)
    assert_within_rule("out", out, ref_out, naive_out)


def test_flash_attention_2_positional_order_and_flash_attention_3_keywords():
    # FA2: (q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
    # return_attn_probs); causal keeps the window's left edge and sets the right one to 0. FA3's keywords at
    # their neutral values change nothing.
    q, k, v = randn(2, 150, 4, 128), randn(2, 170, 2, 128), randn(2, 170, 2, 128)
    positional = run(flash4.flash_attn_func, q, k, v, 0.0, 0.2, True, (32, 7), 5.0, None, True, False)
    keywords = run(flash4.flash_attn_func, q, k, v, softmax_scale=0.2, causal=True, window_size=(32, 0), softcap=5.0,
                   deterministic=True)
    fa3 = run(flash4.flash_attn_func, q, k, v, softmax_scale=0.2, causal=True, qv=None, q_descale=None,
              k_descale=None, v_descale=None, window_size=(32, -1), attention_chunk=0, softcap=5.0, num_splits=1,
              pack_gqa=None, deterministic=True, sm_margin=0, return_attn_probs=False)
    assert torch.equal(positional, keywords) and torch.equal(fa3, keywords)
    keep = keep_mask(150, 170, causal=False, window=(32, 0))
    ref_out, _ = attention(q, k, v, 0.2, keep, softcap=5.0)
    naive_out, _ = attention(q, k, v, 0.2, keep, softcap=5.0, precise=False)
    assert_within_rule("out", positional, ref_out, naive_out)


# ---------------------------------------------------------------- empty problems


@pytest.mark.parametrize("seqlen_q, seqlen_k", [(37, 0), (0, 41), (0, 0)])
def test_fixed_length_without_queries_or_keys(needs_backward, seqlen_q, seqlen_k):
    q = randn(2, seqlen_q, 4, 128, requires_grad=True)
    k, v = (randn(2, seqlen_k, 2, 128, requires_grad=True) for _ in "kv")
    with nan_allocations():
        out, lse = run(flash4.flash_attn_func, q, k, v, causal=True, return_lse=True)
    assert out.shape == q.shape and lse.shape == (2, 4, seqlen_q)
    assert torch.equal(out, torch.zeros_like(out)) and torch.isneginf(lse).all()  # FlashAttention: O = 0, LSE = -inf
    dout = torch.randn_like(out)
    with nan_allocations():
        dq, dk, dv = torch.autograd.grad(out, (q, k, v), dout)
    for name, grad, like in (("dq", dq, q), ("dk", dk, k), ("dv", dv, v)):
        assert grad.shape == like.shape and torch.equal(grad, torch.zeros_like(grad)), name


@pytest.mark.parametrize("lengths_q, lengths_k", [
    ([5, 0, 40, 17], [0, 7, 33, 17]),  # a sequence without keys, one without queries
    ([5, 40], [0, 0]),  # no key rows at all (total_k = 0)
    ([0, 0], [9, 30]),  # no query rows at all (total_q = 0)
])
def test_varlen_with_empty_sequences(needs_backward, lengths_q, lengths_k):
    q = randn(sum(lengths_q), 8, 128, requires_grad=True)
    k, v = (randn(sum(lengths_k), 2, 128, requires_grad=True) for _ in "kv")
    cu_q, cu_k = cu_seqlens(lengths_q), cu_seqlens(lengths_k)
    with nan_allocations():
        out, lse = run(flash4.flash_attn_varlen_func, q, k, v, cu_q, cu_k, max(lengths_q), max(lengths_k),
                       causal=True, return_lse=True)
    dout = torch.randn_like(out)
    with nan_allocations():
        grads = torch.autograd.grad(out, (q, k, v), dout)
    ref_inputs = [t.detach().float().requires_grad_() for t in (q, k, v)]
    ref_out, ref_lse = varlen_attention(*ref_inputs, cu_q, cu_k, True)
    naive_inputs = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    naive_out, naive_lse = varlen_attention(*naive_inputs, cu_q, cu_k, True, precise=False)
    assert_within_rule("out", out, ref_out, naive_out)
    assert_within_rule("lse", lse, ref_lse, naive_lse, LSE_FLOOR)
    for b, (length_q, length_k) in enumerate(zip(lengths_q, lengths_k)):
        if length_k == 0:  # FlashAttention: O = 0 and LSE = -inf for rows that see no key
            rows = slice(sum(lengths_q[:b]), sum(lengths_q[:b + 1]))
            assert torch.equal(out[rows], torch.zeros_like(out[rows])) and torch.isneginf(lse[:, rows]).all()
    if not out.numel():  # no query rows: nothing flows back to k and v
        for name, grad, like in (("dk", grads[1], k), ("dv", grads[2], v)):
            assert grad.shape == like.shape and torch.equal(grad, torch.zeros_like(grad)), name
        return
    ref_grads = torch.autograd.grad(ref_out, ref_inputs, dout.float(), allow_unused=True)
    naive_grads = torch.autograd.grad(naive_out, naive_inputs, dout, allow_unused=True)
    for name, got, ref, naive, like in zip(("dq", "dk", "dv"), grads, ref_grads, naive_grads, (q, k, v)):
        ref = torch.zeros_like(like, dtype=torch.float32) if ref is None else ref
        naive = torch.zeros_like(like) if naive is None else naive
        assert_within_rule(name, got, ref, naive)


# ---------------------------------------------------------------- what the eager path must never do


def test_no_host_synchronization(needs_backward):
    # torch's sync debug mode raises on any call that waits for the device (a device-to-host copy, say).
    q, k, v = (randn(2, 128, 4, 64, requires_grad=True) for _ in "qkv")
    rows = [t.detach().flatten(0, 1).requires_grad_() for t in (q, k, v)]
    cu = cu_seqlens([100, 156])
    run(flash4.flash_attn_func, q, k, v)  # opens the library outside the checked region
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        flash4.flash_attn_func(q, k, v, causal=True).sum().backward()
        flash4.flash_attn_varlen_func(*rows, cu, cu, 156, 156, causal=True).sum().backward()
        flash4.flash_attn_qkvpacked_func(torch.stack([q, k, v], dim=2).detach().requires_grad_()).sum().backward()
        with pytest.raises(RuntimeError, match="synchroniz"):  # the check can fail: a missing bound reads the offsets
            flash4.flash_attn_varlen_func(*rows, cu, cu, None, 156)
    finally:
        torch.cuda.set_sync_debug_mode("default")


BACKWARD_REPEATS = 200


@pytest.mark.parametrize("batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim", [
    (1, 64, 128, 2, 1, 64),  # a workspace under 1 MiB: the allocator's small pool, where the lse copy lives
    (2, 128, 256, 8, 2, 128),  # the ring's second-half step at W = 3, D = 128 (the workspace in the large pool)
])
def test_backward_with_a_sliced_lse_is_exact_every_time(needs_backward, batch, seqlen_q, seqlen_k, heads_q, heads_kv,
                                                        head_dim):
    # The ring's second-half query rows pass lse[..., half:], which the backward copies to a packed tensor. That
    # copy must live until the kernels have read it: freed earlier, its memory went back to the caching
    # allocator, where the workspace allocated next (or, in the simulated ring, another rank's tensor on the
    # same stream) could take it before the kernels ran (the ring's dq error of 0.159).
    q = randn(batch, seqlen_q, heads_q, head_dim)
    k, v = randn(batch, seqlen_k, heads_kv, head_dim), randn(batch, seqlen_k, heads_kv, head_dim)
    options = (head_dim**-0.5, False, -1, -1, 0.0, True)  # deterministic: equal bits expected
    out, lse = run(torch.ops.flash4.fwd, q, k, v, *options)
    wide = torch.full((batch, heads_q, 2 * seqlen_q), float("nan"), device="cuda")
    wide[..., seqlen_q:] = lse
    sliced = wide[..., seqlen_q:]
    assert not sliced.is_contiguous()
    dout = torch.randn_like(out)
    expected = torch.ops.flash4.bwd(dout, q, k, v, out, lse, *options, None)
    for repeat in range(BACKWARD_REPEATS):
        with nan_allocations() if repeat % 2 else contextlib.nullcontext():
            got = torch.ops.flash4.bwd(dout, q, k, v, out, sliced, *options, None)
        for name, a, b in zip(("dq", "dk", "dv"), got, expected):
            assert torch.equal(a, b), f"{name} differs at repeat {repeat}"


# ---------------------------------------------------------------- sinks and seqused in the packed forms

USED_Q, USED_K = [30, 0, 200, 100], [50, 5, 170, 1]  # at most LENGTHS_Q / LENGTHS_K, some rows unused
PACKED_WITH_EXTRAS = {
    # name: (packed inputs, split, call(packed inputs, sink), the same call of the unpacked function)
    "flash_attn_qkvpacked_func": (
        lambda: [randn(2, 177, 3, 4, 128, requires_grad=True)], lambda qkv: qkv.unbind(2),
        lambda qkv, sink: flash4.flash_attn_qkvpacked_func(qkv, causal=True, deterministic=True, learnable_sink=sink,
                                                           return_lse=True),
        lambda q, k, v, sink: flash4.flash_attn_func(q, k, v, causal=True, deterministic=True, learnable_sink=sink,
                                                     return_lse=True)),
    "flash_attn_kvpacked_func": (
        lambda: list(_fixed((2, 177, 4, 128), (2, 203, 2, 2, 128))), lambda q, kv: (q, *kv.unbind(2)),
        lambda q, kv, sink: flash4.flash_attn_kvpacked_func(q, kv, causal=True, deterministic=True,
                                                            learnable_sink=sink, return_lse=True),
        lambda q, k, v, sink: flash4.flash_attn_func(q, k, v, causal=True, deterministic=True, learnable_sink=sink,
                                                     return_lse=True)),
    "flash_attn_varlen_qkvpacked_func": (
        lambda: [randn(sum(LENGTHS_Q), 3, 4, 128, requires_grad=True)], lambda qkv: qkv.unbind(1),
        lambda qkv, sink: flash4.flash_attn_varlen_qkvpacked_func(
            qkv, cu_seqlens(LENGTHS_Q), max(LENGTHS_Q), causal=True, deterministic=True, learnable_sink=sink,
            seqused=torch.tensor(USED_Q, dtype=torch.int32, device="cuda"), return_lse=True),
        lambda q, k, v, sink: flash4.flash_attn_varlen_func(
            q, k, v, cu_seqlens(LENGTHS_Q), cu_seqlens(LENGTHS_Q), max(LENGTHS_Q), max(LENGTHS_Q), causal=True,
            deterministic=True, learnable_sink=sink, seqused_q=torch.tensor(USED_Q, dtype=torch.int32, device="cuda"),
            seqused_k=torch.tensor(USED_Q, dtype=torch.int32, device="cuda"), return_lse=True)),
    "flash_attn_varlen_kvpacked_func": (
        lambda: [randn(sum(LENGTHS_Q), 4, 128, requires_grad=True),
                 randn(sum(LENGTHS_K), 2, 2, 128, requires_grad=True)], lambda q, kv: (q, *kv.unbind(1)),
        lambda q, kv, sink: flash4.flash_attn_varlen_kvpacked_func(
            q, kv, cu_seqlens(LENGTHS_Q), cu_seqlens(LENGTHS_K), max(LENGTHS_Q), max(LENGTHS_K), causal=True,
            deterministic=True, learnable_sink=sink, seqused_q=torch.tensor(USED_Q, dtype=torch.int32, device="cuda"),
            seqused_k=torch.tensor(USED_K, dtype=torch.int32, device="cuda"), return_lse=True),
        lambda q, k, v, sink: flash4.flash_attn_varlen_func(
            q, k, v, cu_seqlens(LENGTHS_Q), cu_seqlens(LENGTHS_K), max(LENGTHS_Q), max(LENGTHS_K), causal=True,
            deterministic=True, learnable_sink=sink, seqused_q=torch.tensor(USED_Q, dtype=torch.int32, device="cuda"),
            seqused_k=torch.tensor(USED_K, dtype=torch.int32, device="cuda"), return_lse=True)),
}


@pytest.mark.parametrize("form", PACKED_WITH_EXTRAS)
def test_packed_forms_with_sinks_equal_the_unpacked_call(needs_backward, form):
    # deterministic=True: both calls launch the same kernels on the same values, so equal bits, sinks'
    # gradient included (the unpacked function's sinks and seqused are tested against the reference in
    # test_gpu_sinks_seqused.py). Only rows below seqused_q are compared: the others are left unwritten.
    make, split, packed_call, unpacked_call = PACKED_WITH_EXTRAS[form]
    inputs = make()
    sink = torch.randn(4, device="cuda", requires_grad=True)
    out, lse = run(packed_call, *inputs, sink)
    separate = [t.detach().clone().requires_grad_() for t in split(*inputs)]
    sink_again = sink.detach().clone().requires_grad_()
    expected_out, expected_lse = run(unpacked_call, *separate, sink_again)
    if out.dim() == 3:  # varlen: rows past each sequence's seqused_q are not written
        used = torch.cat([torch.arange(n, device="cuda") < u for n, u in zip(LENGTHS_Q, USED_Q)])
        out, lse, expected_out, expected_lse = out[used], lse[:, used], expected_out[used], expected_lse[:, used]
    assert torch.equal(out, expected_out) and torch.equal(lse, expected_lse)
    dout = torch.randn_like(out)
    grads = torch.autograd.grad(out, (*inputs, sink), dout)
    expected = torch.autograd.grad(expected_out, (*separate, sink_again), dout)
    for got, want in zip(split(*grads[:-1]), expected[:-1]):
        assert torch.equal(got, want)
    assert torch.equal(grads[-1], expected[-1]), "dsink"
