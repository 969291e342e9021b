"""flash4.distributed on CPU: the LSE merge, the zig-zag bookkeeping, argument errors, and the ring itself.

The ring runs with ReferenceLocal (plain torch, fp64) as its local kernel, so everything but flash4's own
kernels is exercised here: once over a single-process simulated ring (threads, W = 1, 3, 4) and once over
torch.distributed with the gloo backend, world size 2, in two spawned processes. Both compare out, lse and
dq/dk/dv with attention computed in one piece by torch autograd (fp64), causal (zig-zag) and not, MHA and
GQA. tests/python/gpu/dist_ring_check.py repeats the comparison with flash4 on two GPUs.
"""

import importlib.util
import json
import math
import queue
import sys
import threading
from pathlib import Path

import pytest
import torch

if importlib.util.find_spec("flash4") is None:  # tools/run-tests.sh sets PYTHONPATH=python; a bare pytest may not
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

from flash4.distributed import (  # noqa: E402
    Flash4Local,
    ReferenceLocal,
    Step,
    merge_attention,
    merge_attention_list,
    ring_flash_attn_func,
    step_kind,
    zigzag_positions,
    zigzag_shard,
    zigzag_unshard,
)

F64 = torch.float64
EXACT = 1e-10  # fp64 everywhere: the ring and the one-piece computation differ by rounding only


# ---------------------------------------------------------------- helpers


def attention(q, k, v, keep, scale=None, softcap=0.0, round_to=None):
    """(out (B, Sq, Hq, D), lse (B, Hq, Sq)) by torch autograd-friendly math; keep (Sq, Sk) bool.

    Fully masked rows give out = 0, lse = -inf (flash4's convention). round_to: the naive low-precision
    computation of the tolerance rule (P and out rounded to that dtype)."""
    scale = scale or q.shape[-1] ** -0.5
    groups = q.shape[2] // k.shape[2]
    dtype = F64 if q.dtype == F64 else torch.float32
    k, v = (t.repeat_interleave(groups, dim=2) for t in (k, v))
    q, k, v = (t.to(dtype).transpose(1, 2) for t in (q, k, v))
    scores = q @ k.transpose(-1, -2) * scale
    if softcap:
        scores = softcap * torch.tanh(scores / softcap)
    scores = scores.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    p = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    if round_to is not None:
        p = p.to(round_to).to(dtype)
    out = (p @ v).transpose(1, 2)
    return (out if round_to is None else out.to(round_to).to(dtype)), lse


def causal_keep(seqlen_q, seqlen_k):
    """Bottom-right aligned causal mask (flash4.h): query i sees key j iff j <= i + Sk - Sq."""
    row = torch.arange(seqlen_q)[:, None] + (seqlen_k - seqlen_q)
    return torch.arange(seqlen_k)[None, :] <= row


def max_error(got, ref):
    got, ref = got.detach(), ref.detach()
    finite = torch.isfinite(ref)
    assert torch.equal(got[~finite], ref[~finite]), "differs where the reference is infinite"
    assert torch.isfinite(got[finite]).all(), "non-finite values"
    return (got - ref)[finite].abs().max().item() if finite.any() else 0.0


def randn(*shape, dtype=F64, generator=None):
    return torch.randn(*shape, dtype=dtype, generator=generator)


# ---------------------------------------------------------------- merge


@pytest.mark.parametrize("chunks", [1, 2, 3, 5])
@pytest.mark.parametrize("causal", [False, True])
def test_merge_of_key_chunks_equals_one_piece(chunks, causal):
    # Sq > Sk with a causal mask: the first rows see no key at all (lse -inf, out 0 after the merge too), and
    # many (row, chunk) pairs are fully masked within a chunk.
    seqlen_q, seqlen_k = 23, 15 if causal else 23
    q, k, v = randn(2, seqlen_q, 4, 16), randn(2, seqlen_k, 2, 16), randn(2, seqlen_k, 2, 16)
    keep = causal_keep(seqlen_q, seqlen_k) if causal else torch.ones(seqlen_q, seqlen_k, dtype=torch.bool)
    ref_out, ref_lse = attention(q, k, v, keep)
    bounds = [round(i * seqlen_k / chunks) for i in range(chunks + 1)]
    parts = [attention(q, k[:, a:b], v[:, a:b], keep[:, a:b]) for a, b in zip(bounds, bounds[1:])]

    out, lse = parts[0]
    for part_out, part_lse in parts[1:]:
        out, lse = merge_attention(out, lse, part_out, part_lse)
    list_out, list_lse = merge_attention_list([p[0] for p in parts], [p[1] for p in parts])
    for got_out, got_lse in ((out, lse), (list_out, list_lse)):
        assert got_out.dtype == F64 and got_lse.shape == ref_lse.shape
        assert max_error(got_out, ref_out) < EXACT
        assert max_error(got_lse, ref_lse) < EXACT
    if causal:
        assert torch.isneginf(lse[:, :, : seqlen_q - seqlen_k]).all() and (out[:, : seqlen_q - seqlen_k] == 0).all()


def test_merge_bf16_chunks_within_tolerance_rule():
    # Partial results as a bf16 kernel gives them (out rounded to bf16, lse fp32), merged, against fp32 attention
    # in one piece: the tolerance rule of tests/tolerance.hpp (2 x the naive bf16 error + a floor).
    gen = torch.Generator().manual_seed(1)
    q, k, v = (randn(1, 256, 4, 64, dtype=torch.bfloat16, generator=gen) for _ in range(3))
    keep = causal_keep(256, 256)
    ref_out, ref_lse = attention(q, k, v, keep)
    naive_out, _ = attention(q, k, v, keep, round_to=torch.bfloat16)
    parts = [attention(q, k[:, a:a + 64], v[:, a:a + 64], keep[:, a:a + 64], round_to=torch.bfloat16)
             for a in range(0, 256, 64)]
    out, lse = merge_attention_list([p[0].to(torch.bfloat16) for p in parts], [p[1].float() for p in parts])
    assert out.dtype == torch.float32
    assert max_error(out, ref_out) <= 2 * max_error(naive_out, ref_out) + 1e-4
    assert max_error(lse, ref_lse) <= 1e-4


def test_merge_of_two_empty_parts_is_empty_without_nan():
    out = torch.zeros(1, 3, 2, 4)
    lse = torch.full((1, 2, 3), float("-inf"))
    merged_out, merged_lse = merge_attention(out, lse, out, lse)
    assert torch.isneginf(merged_lse).all() and (merged_out == 0).all()
    merged_out, merged_lse = merge_attention_list([out] * 3, [lse] * 3)
    assert torch.isneginf(merged_lse).all() and (merged_out == 0).all()


def test_merge_varlen_layout():
    q, k, v = randn(1, 9, 2, 8), randn(1, 12, 2, 8), randn(1, 12, 2, 8)
    keep = torch.ones(9, 12, dtype=torch.bool)
    ref_out, ref_lse = attention(q, k, v, keep)
    (out_a, lse_a), (out_b, lse_b) = (attention(q, k[:, s], v[:, s], keep[:, s]) for s in (slice(0, 5), slice(5, 12)))
    out, lse = merge_attention(out_a[0], lse_a[0], out_b[0], lse_b[0])  # (T, H, D) and (H, T)
    assert max_error(out, ref_out[0]) < EXACT and max_error(lse, ref_lse[0]) < EXACT


@pytest.mark.parametrize("arguments, message", [
    (lambda o, l: (o, l, o[:, :2], l[..., :2]), r"out_b has shape \(1, 2, 2, 4\) but out_a has \(1, 3, 2, 4\)"),
    (lambda o, l: (o, l.transpose(1, 2), o, l), r"lse_a has shape \(1, 3, 2\) but out_a \(1, 3, 2, 4\) needs "),
    (lambda o, l: (o[0, 0], l, o, l), r"out_a must be \(B, S, H, D\) or \(T, H, D\)"),
])
def test_merge_errors_name_the_argument(arguments, message):
    out, lse = torch.zeros(1, 3, 2, 4), torch.zeros(1, 2, 3)
    with pytest.raises(ValueError, match=message):
        merge_attention(*arguments(out, lse))


def test_merge_list_errors():
    with pytest.raises(ValueError, match="non-empty and of one length"):
        merge_attention_list([], [])
    with pytest.raises(ValueError, match=r"outs\[1\] has shape"):
        merge_attention_list([torch.zeros(1, 3, 2, 4), torch.zeros(1, 2, 2, 4)],
                             [torch.zeros(1, 2, 3), torch.zeros(1, 2, 2)])


# ---------------------------------------------------------------- zig-zag bookkeeping


@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 8])
def test_zigzag_shard_unshard_and_positions(world_size):
    seqlen = 2 * world_size * 3
    x = torch.arange(2 * seqlen).view(2, seqlen)  # sequence along dim 1
    shards = [zigzag_shard(x, r, world_size) for r in range(world_size)]
    assert torch.equal(zigzag_unshard(shards), x)
    for rank, shard in enumerate(shards):
        assert torch.equal(shard[0], zigzag_positions(seqlen, rank, world_size))
    assert torch.equal(torch.sort(torch.cat([s[0] for s in shards])).values, torch.arange(seqlen))


@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 5])
def test_step_kinds_reproduce_the_global_causal_mask(world_size):
    # For every (rank, visiting shard) pair, the rows and keys the step computes on, and whether it masks the
    # diagonal, must be exactly the global causal mask restricted to the two shards' positions.
    seqlen, chunk = 2 * world_size * 4, 4
    keep = causal_keep(seqlen, seqlen)
    work = []
    for rank in range(world_size):
        rows = zigzag_positions(seqlen, rank, world_size)
        done = 0
        for src in range(world_size):
            cols = zigzag_positions(seqlen, src, world_size)
            kind = step_kind(rank, src, causal=True)
            expected = torch.zeros(2 * chunk, 2 * chunk, dtype=torch.bool)
            if kind is Step.DIAGONAL:
                expected = causal_keep(2 * chunk, 2 * chunk)
            elif kind is Step.FIRST_KEYS:
                expected[:, :chunk] = True
            elif kind is Step.SECOND_QUERIES:
                expected[chunk:, :] = True
            else:
                pytest.fail(f"causal step of kind {kind}")
            assert torch.equal(keep[rows][:, cols], expected), (rank, src, kind)
            done += int(expected.sum())
        work.append(done)
    assert len(set(work)) == 1  # the load balance: every rank computes the same number of scores
    assert step_kind(0, 1, causal=False) is Step.FULL


@pytest.mark.parametrize("call, message", [
    (lambda: zigzag_shard(torch.zeros(1, 10, 2), 0, 3),
     r"x \(dim 1\) has 10 rows, not a multiple of 2 \* world_size = 6"),
    (lambda: zigzag_shard(torch.zeros(12, 1), 0, 4, dim=0),
     r"x \(dim 0\) has 12 rows, not a multiple of 2 \* world_size = 8"),
    (lambda: zigzag_positions(12, 3, 3), r"rank must be in \[0, 3\), got 3"),
    (lambda: zigzag_positions(12, 0, 0), "world_size must be a positive int, got 0"),
    (lambda: zigzag_unshard([torch.zeros(1, 3)]), "every shard needs an even length along dim 1"),
])
def test_zigzag_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# ---------------------------------------------------------------- the local reference kernel


@pytest.mark.parametrize("causal, softcap", [(False, 0.0), (True, 0.0), (True, 5.0)])
def test_reference_local_backward_matches_autograd(causal, softcap):
    # One block with the block's own out and lse: ReferenceLocal's explicit backward (P from lse, Delta from out)
    # against torch autograd through softmax.
    q, k, v = (randn(2, s, h, 8).requires_grad_() for s, h in ((7, 4), (9, 2), (9, 2)))
    local = ReferenceLocal()
    keep = causal_keep(7, 9) if causal else torch.ones(7, 9, dtype=torch.bool)
    ref_out, ref_lse = attention(q, k, v, keep, scale=0.3, softcap=softcap)
    out, lse = local.forward(q.detach(), k.detach(), v.detach(), causal, 0.3, softcap)
    assert max_error(out, ref_out) < EXACT and max_error(lse, ref_lse) < EXACT
    dout = randn(*out.shape)
    ref_grads = torch.autograd.grad(ref_out, (q, k, v), dout)
    grads = local.backward(dout, q.detach(), k.detach(), v.detach(), out, lse, causal, 0.3, softcap)
    for name, got, ref in zip("qkv", grads, ref_grads):
        assert got.shape == ref.shape, name
        assert max_error(got, ref) < EXACT, name


# ---------------------------------------------------------------- the ring

# (name, world-size-independent settings); S_total is a multiple of 2W for W in 1..4.
RING_CASES = {
    "mha": dict(causal=False, heads=(4, 4), softcap=0.0),
    "mha_causal": dict(causal=True, heads=(4, 4), softcap=0.0),
    "gqa": dict(causal=False, heads=(4, 2), softcap=0.0),
    "gqa_causal": dict(causal=True, heads=(4, 1), softcap=0.0),
    "softcap_causal": dict(causal=True, heads=(2, 2), softcap=3.0),
}
SEQLEN, BATCH, HEAD_DIM = 48, 2, 8


def ring_case_errors(ring, causal, heads, softcap, seed=0):
    """Max errors of this rank's ring results against attention in one piece (every rank draws the same inputs).

    Causal shards are zig-zag; non-causal ones are contiguous blocks (any split must work without a mask)."""
    gen = torch.Generator().manual_seed(seed)
    heads_q, heads_kv = heads
    q, k, v = (randn(BATCH, SEQLEN, h, HEAD_DIM, generator=gen).requires_grad_() for h in (heads_q, heads_kv, heads_kv))
    dout = randn(BATCH, SEQLEN, heads_q, HEAD_DIM, generator=gen)
    keep = causal_keep(SEQLEN, SEQLEN) if causal else torch.ones(SEQLEN, SEQLEN, dtype=torch.bool)
    ref_out, ref_lse = attention(q, k, v, keep, softcap=softcap)
    ref_grads = torch.autograd.grad(ref_out, (q, k, v), dout)

    rank, world_size = ring.rank, ring.world_size
    if causal:
        def shard(t, dim=1):
            return zigzag_shard(t.detach(), rank, world_size, dim=dim)
    else:
        def shard(t, dim=1):
            return t.detach().chunk(world_size, dim=dim)[rank].clone()
    q_local, k_local, v_local = (shard(t).requires_grad_() for t in (q, k, v))
    out, lse = ring_flash_attn_func(q_local, k_local, v_local, ring, causal=causal, softcap=softcap,
                                    return_lse=True, local=ReferenceLocal())
    out.backward(shard(dout))
    assert out.dtype == F64 and lse.shape == (BATCH, heads_q, SEQLEN // world_size)
    errors = {"out": max_error(out, shard(ref_out)), "lse": max_error(lse, shard(ref_lse, dim=2))}
    for name, local, ref in zip(("dq", "dk", "dv"), (q_local, k_local, v_local), ref_grads):
        assert local.grad.shape == local.shape, name
        errors[name] = max_error(local.grad, shard(ref))
    return errors


class ThreadRing:
    """A simulated ring of `world_size` ranks in one process, one thread per rank, messages through queues.

    Exchanges are numbered in program order on every rank and matched by number, as NCCL and gloo match
    point-to-point messages by their order."""

    def __init__(self, rank, world_size, inboxes):
        self.rank, self.world_size, self.inboxes = rank, world_size, inboxes
        self.sent = 0
        self.received = {}

    def exchange(self, send, recv):
        number, self.sent = self.sent, self.sent + 1
        self.inboxes[(self.rank + 1) % self.world_size].put((number, send.detach().clone()))
        return _ThreadPending(self, number, recv)


class _ThreadPending:
    def __init__(self, ring, number, recv):
        self.ring, self.number, self.recv = ring, number, recv

    def wait(self):
        while self.number not in self.ring.received:
            number, tensor = self.ring.inboxes[self.ring.rank].get(timeout=30)
            self.ring.received[number] = tensor
        self.recv.copy_(self.ring.received.pop(self.number))


def run_thread_ring(world_size, function):
    """[function(ring) for each rank], run concurrently; re-raises the first rank's exception."""
    inboxes = [queue.Queue() for _ in range(world_size)]
    results, failures = [None] * world_size, []

    def body(rank):
        try:
            results[rank] = function(ThreadRing(rank, world_size, inboxes))
        except BaseException as err:  # noqa: BLE001 - re-raised below, on the test's thread
            failures.append(err)

    threads = [threading.Thread(target=body, args=(rank,)) for rank in range(world_size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    if failures:
        raise failures[0]
    return results


@pytest.mark.parametrize("world_size", [1, 3, 4])
@pytest.mark.parametrize("case", sorted(RING_CASES))
def test_thread_ring_matches_one_piece(world_size, case):
    for rank, errors in enumerate(run_thread_ring(world_size, lambda ring: ring_case_errors(ring, **RING_CASES[case]))):
        for name, error in errors.items():
            assert error < EXACT, f"rank {rank}: {name} error {error:.3g}"


def test_thread_ring_bf16_accumulates_in_fp32():
    # bf16 inputs: out comes back bf16, lse fp32 (as flash4's), gradients in the inputs' dtypes.
    def body(ring):
        q, k, v = (torch.randn(1, 8, 2, 8, dtype=torch.bfloat16).requires_grad_() for _ in range(3))
        out, lse = ring_flash_attn_func(q, k, v, ring, causal=True, return_lse=True,
                                        local=ReferenceLocal(torch.float32))
        out.float().sum().backward()
        return out.dtype, lse.dtype, q.grad.dtype, k.grad.dtype

    for dtypes in run_thread_ring(2, body):
        assert dtypes == (torch.bfloat16, torch.float32, torch.bfloat16, torch.bfloat16)


def _gloo_worker(rank, world_size, init_file, result_dir):
    import torch.distributed as dist

    from flash4.distributed import DistRing

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    try:
        results = {case: ring_case_errors(DistRing(), **settings) for case, settings in RING_CASES.items()}
        # The same through a sub-group object (peer ranks translated from group to global numbering).
        group = dist.new_group(list(range(world_size)))
        results["mha_causal_subgroup"] = ring_case_errors(DistRing(group), **RING_CASES["mha_causal"])
    except BaseException as err:  # noqa: BLE001 - reported to the test through the result file
        results = {"error": f"{type(err).__name__}: {err}"}
    (Path(result_dir) / f"rank{rank}.json").write_text(json.dumps(results))
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def gloo_results(tmp_path_factory):
    import torch.distributed as dist
    import torch.multiprocessing as mp

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with the gloo backend is not available in this torch build")
    result_dir = tmp_path_factory.mktemp("gloo")
    world_size = 2
    # Not fork: autograd's threads, once another test has started them, do not survive a fork. A fork server
    # imports torch once and forks both ranks from it (two spawned ranks would each import torch: 5-20 s on a
    # busy 2-core CI machine).
    start_method = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
    if start_method == "forkserver":
        mp.get_context("forkserver").set_forkserver_preload(["torch", "torch.distributed", "pytest"])
    mp.start_processes(_gloo_worker, args=(world_size, str(result_dir / "init"), str(result_dir)),
                       nprocs=world_size, join=True, start_method=start_method)
    return [json.loads((result_dir / f"rank{rank}.json").read_text()) for rank in range(world_size)]


@pytest.mark.parametrize("case", sorted(RING_CASES) + ["mha_causal_subgroup"])
def test_gloo_ring_world_size_2_matches_one_piece(gloo_results, case):
    for rank, results in enumerate(gloo_results):
        assert "error" not in results, f"rank {rank}: {results.get('error')}"
        for name, error in results[case].items():
            assert error < EXACT, f"rank {rank}: {name} error {error:.3g}"


# ---------------------------------------------------------------- argument errors


def _ring_call(**replace):
    q, k, v = randn(1, 8, 4, 8), randn(1, 8, 2, 8), randn(1, 8, 2, 8)
    arguments = dict(q=q, k=k, v=v, group=ThreadRing(0, 1, [queue.Queue()]), causal=True, local=ReferenceLocal())
    return ring_flash_attn_func(**(arguments | replace))


@pytest.mark.parametrize("replace, error, message", [
    (lambda: {"q": [1.0]}, TypeError, "q must be a torch.Tensor, got list"),
    (lambda: {"k": randn(8, 2, 8)}, ValueError, r"k must be 4-D \(batch, seqlen_local, heads, head_dim\)"),
    (lambda: {"v": randn(1, 8, 2, 8, dtype=torch.float32)}, TypeError,
     "v has dtype torch.float32 but q has torch.float64"),
    (lambda: {"v": randn(1, 8, 1, 8)}, ValueError, r"v has shape \(1, 8, 1, 8\) but k has \(1, 8, 2, 8\)"),
    (lambda: {"k": randn(2, 8, 2, 8), "v": randn(2, 8, 2, 8)}, ValueError, "k has batch size 2 but q has 1"),
    (lambda: {"k": randn(1, 6, 2, 8), "v": randn(1, 6, 2, 8)}, ValueError, "k has 6 rows but q has 8"),
    (lambda: {"k": randn(1, 8, 2, 4), "v": randn(1, 8, 2, 4)}, ValueError, "k has head_dim 4 but q has 8"),
    (lambda: {"k": randn(1, 8, 3, 8), "v": randn(1, 8, 3, 8)}, ValueError, "q has 4 heads, not a multiple of k's 3"),
    (lambda: {"q": randn(1, 7, 4, 8), "k": randn(1, 7, 2, 8), "v": randn(1, 7, 2, 8)}, ValueError,
     "q has 7 rows per rank; causal ring attention needs an even number"),
    (lambda: {"q": randn(1, 0, 4, 8)}, ValueError, r"q has shape \(1, 0, 4, 8\); every size must be >= 1"),
    (lambda: {"softmax_scale": -1.0}, ValueError, "softmax_scale must be a finite number > 0, got -1.0"),
    (lambda: {"softmax_scale": math.inf}, ValueError, "softmax_scale must be a finite number > 0"),
    (lambda: {"softcap": -2.0}, ValueError, "softcap must be a finite number >= 0"),
])
def test_ring_errors_name_the_argument(replace, error, message):
    with pytest.raises(error, match=message):
        _ring_call(**replace())


def test_ring_odd_rows_fine_without_causal():
    q, k, v = randn(1, 7, 2, 8), randn(1, 7, 2, 8), randn(1, 7, 2, 8)
    out = _ring_call(q=q, k=k, v=v, causal=False)
    assert max_error(out, attention(q, k, v, torch.ones(7, 7, dtype=torch.bool))[0]) < EXACT


def test_ring_without_process_group_says_so():
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        pytest.skip("a process group is initialized in this process")
    with pytest.raises(RuntimeError, match="group: torch.distributed is not initialized"):
        _ring_call(group=None)


def test_flash4_local_rejects_cpu_tensors_before_any_launch():
    with pytest.raises(ValueError, match="q is on cpu; flash4's local kernel runs on CUDA tensors"):
        _ring_call(q=randn(1, 8, 4, 8, dtype=torch.bfloat16), k=randn(1, 8, 2, 8, dtype=torch.bfloat16),
                   v=randn(1, 8, 2, 8, dtype=torch.bfloat16), local=Flash4Local())
