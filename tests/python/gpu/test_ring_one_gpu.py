"""flash4.distributed with flash4 as the local kernel, on ONE GPU: the LSE merge and a simulated ring.

The one-GPU part of the ring checks (tests/python/gpu/dist_ring_check.py is the torchrun part on 2+ GPUs):

  * merge: flash4's forward over W = 2..4 key chunks of one sequence (causal: the query-chunk x key-chunk
    blocks the ring computes - equal-size diagonal blocks with flash4's causal mask, blocks below the
    diagonal unmasked, blocks above skipped), merged with merge_attention_list and with merge_attention one
    part at a time, against one flash4 call over the whole sequence and an fp32 torch reference;
  * ring: ring_flash_attn_func's forward and ring_backward with Flash4Local over a ring of W = 2 and 3 ranks
    simulated in this process (one thread per rank, messages through queues, as the CPU tests do), causal
    zig-zag shards and non-causal contiguous shards, GQA 4:1, D = 64 and 128, bf16; the gathered out, lse
    and dq/dk/dv against single-call flash4 on the whole sequence and the fp32 reference;
  * the case W = 3, causal, D = 128 over 200 fresh seeds (once failed on the H200: see RING_SEEDS);
  * W = 1 through autograd (ring_flash_attn_func(...).backward()), deterministic: bit-identical to
    flash_attn_func, which checks the autograd wrapper on CUDA tensors.

Why the simulated ring calls ring_backward itself rather than out.backward(): torch's autograd engine runs
the backward of CUDA nodes on one worker thread per device, so two simulated ranks' backward passes would
share that thread, and the first to wait for its neighbour's message would block the neighbour: deadlock.
The wrapper's backward (_RingAttention.backward) is ring_backward plus casts, which the W = 1 test covers.

Tolerance rule (docs/design.md, as tests/python/gpu/test_gpu_ops.py): the max error against an fp32
reference must be at most 2 x the max error of the naive bf16 implementation (fp32 scores of the bf16
inputs, P rounded to bf16, fp32 accumulate, output rounded) + a small floor. For a merged or ring result
the naive implementation is the same split computation with the naive kernel in flash4's place (each
block's out and gradients rounded to bf16, as flash4 returns them, then merged / accumulated in fp32 by the
same code; the naive backward rounds P and dS and takes delta from the rounded out: naive_backward.py), and
the budget takes the larger of its error and the one-piece naive error: summing W bf16-rounded partial
gradients costs up to ~W/2 ulp more than one rounded result, which the one-piece rule does not allow for (a CPU emulation of this test put the ring's dq at 1.01 x the one-piece budget for W = 2,
D = 128, with a kernel exactly as accurate as the naive one). Single-call flash4 must pass the one-piece
rule, and the distance between the two results must stay within their two budgets added up.
The rule's code (reference, NaiveLocal, budgets) is in ring_tolerance.py, shared with dist_ring_check.py.

Skips (with the reason) without a CUDA device, on a GPU other than sm_90, without flash4's shared library
(FLASH4_LIBRARY or the installed package), for a case the library was built without, and for the gradient
checks while flash4_bwd reports FLASH4_ERROR_NOT_IMPLEMENTED.
"""

import os
import queue
import secrets
import threading

import pytest
import torch

from flash4 import Flash4Error, Flash4LibraryError, Flash4NotImplementedError, _abi, flash_attn_func
from flash4._loader import load_library
from flash4.distributed import (
    Flash4Local,
    merge_attention,
    merge_attention_list,
    ring_backward,
    ring_flash_attn_func,
    zigzag_shard,
    zigzag_unshard,
)
from ring_tolerance import FLOOR, LSE_FLOOR, budgets, max_error, naive_forward, naive_gradients, NaiveLocal, reference

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

BF16 = torch.bfloat16
DEVICE = "cuda"
NOT_BUILT = {_abi.Status.ERROR_NO_KERNEL, _abi.Status.ERROR_UNSUPPORTED_HEAD_DIM, _abi.Status.ERROR_UNSUPPORTED_DTYPE}
TIMEOUT_S = 60  # a simulated rank waiting longer than this for its neighbour fails instead of hanging


# ---------------------------------------------------------------- skips (as test_gpu_ops.py, plus the library)


@pytest.fixture(scope="module", autouse=True)
def hopper_with_library():
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip(f"flash4's kernels need sm_90 (Hopper); this is {torch.cuda.get_device_name()}")
    try:
        load_library()  # opened here, once, before any thread of the simulated ring needs it
    except Flash4LibraryError as err:
        pytest.skip(f"flash4's shared library is not available: {err}")


@pytest.fixture(scope="module")
def backward_missing():
    """The library's message when its backward is not implemented, else None."""
    q = torch.randn(1, 128, 1, 64, dtype=BF16, device=DEVICE, requires_grad=True)
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


# ---------------------------------------------------------------- references and the tolerance rule


def randn(*shape, generator, requires_grad=False):
    return torch.randn(*shape, dtype=BF16, device=DEVICE, generator=generator).requires_grad_(requires_grad)


def check(name, got, single, ref, naive, naive_split, floor=FLOOR):
    """The tolerance rule for `got` (merged or ring result) and for single-call flash4, and their agreement.

    naive: the naive bf16 computation in one piece; naive_split: the same split computation as `got` with
    the naive kernel in flash4's place."""
    assert got.shape == ref.shape, f"{name}: shape {tuple(got.shape)}, expected {tuple(ref.shape)}"
    assert torch.isfinite(got).all() and torch.isfinite(single).all(), f"{name}: non-finite values"
    naive_error, split_error, single_budget, budget = budgets(ref, naive, naive_split, floor)
    error, single_error, apart = max_error(got, ref), max_error(single, ref), max_error(got, single)
    summary = (f"{name}: error {error:.3g} (budget {budget:.3g}), single-call flash4 {single_error:.3g} (budget "
               f"{single_budget:.3g}), naive bf16 {naive_error:.3g}, naive split {split_error:.3g}, "
               f"vs single-call flash4 {apart:.3g}")
    assert error <= budget, summary
    assert single_error <= single_budget, summary
    assert apart <= budget + single_budget, summary


# ---------------------------------------------------------------- (1) the LSE merge of flash4's partial results


def flash_forward(q, k, v, causal):
    return run(flash_attn_func, q, k, v, causal=causal, return_lse=True)


def merge_both_ways(parts):
    """(merge_attention_list, merge_attention folded left) of [(out, lse), ...]."""
    listed = merge_attention_list([p[0] for p in parts], [p[1] for p in parts])
    out, lse = parts[0]
    for part_out, part_lse in parts[1:]:
        out, lse = merge_attention(out, lse, part_out, part_lse)
    return listed, (out, lse)


@pytest.mark.parametrize("chunks", [2, 3, 4])
@pytest.mark.parametrize("causal", [False, True])
def test_merge_of_flash4_key_chunks(chunks, causal):
    # 1000 rows: chunks that are not multiples of the kernels' tiles, unequal for 3 chunks.
    gen = torch.Generator(device=DEVICE).manual_seed(10 * chunks + causal)
    seqlen = 1000
    q, k, v = (randn(2, seqlen, h, 128, generator=gen) for h in (8, 2, 2))
    bounds = [round(i * seqlen / chunks) for i in range(chunks + 1)]
    blocks = list(zip(bounds, bounds[1:]))

    def chunked(kernel):
        """[(out, lse) by merge_attention_list, the same by merge_attention] of `kernel` over the blocks."""
        if not causal:
            return merge_both_ways([kernel(q, k[:, a:b], v[:, a:b], False) for a, b in blocks])
        # Query chunk i against key chunk j: all of it for j < i, flash4's causal mask for j == i (a square
        # block, so bottom-right alignment is the plain diagonal), nothing for j > i - as the ring's steps.
        rows = []
        for i, (qa, qb) in enumerate(blocks):
            parts = [kernel(q[:, qa:qb], k[:, a:b], v[:, a:b], j == i) for j, (a, b) in enumerate(blocks[:i + 1])]
            rows.append(merge_both_ways(parts))
        return [(torch.cat([r[way][0] for r in rows], dim=1), torch.cat([r[way][1] for r in rows], dim=2))
                for way in range(2)]

    merged, naive_merged = chunked(flash_forward), chunked(naive_forward)
    single_out, single_lse = flash_forward(q, k, v, causal)
    ref_out, ref_lse = reference(q, k, v, causal)
    naive_out, naive_lse = naive_forward(q, k, v, causal)
    for way, (out, lse), (split_out, split_lse) in zip(("merge_attention_list", "merge_attention"), merged,
                                                         naive_merged):
        assert out.dtype == torch.float32 and lse.dtype == torch.float32, way
        check(f"{way} out", out, single_out, ref_out, naive_out, split_out)
        check(f"{way} lse", lse, single_lse, ref_lse, naive_lse, split_lse, LSE_FLOOR)
        # Cast down once, as the ring does: still within the rule.
        check(f"{way} out as bf16", out.to(BF16), single_out, ref_out, naive_out, split_out.to(BF16))


# ---------------------------------------------------------------- (2) a simulated ring on one GPU


class SimulatedRing:
    """One rank of a ring of `world_size` ranks in this process: the rank, world_size, exchange(send, recv)
    members that ring_flash_attn_func / ring_forward / ring_backward accept in place of a DistRing.

    exchange() sends a copy at once (so `send` may change afterwards) and matches messages by their number,
    as NCCL matches point-to-point operations by their order. All ranks share the device's default stream,
    so a copy enqueued by the sending thread precedes the receiver's copy_ enqueued after the hand-off."""

    def __init__(self, rank, world_size, mailboxes):
        self.rank, self.world_size, self.mailboxes = rank, world_size, mailboxes
        self.sent = 0
        self.early = {}  # messages that arrived before their wait()

    def exchange(self, send, recv):
        number, self.sent = self.sent, self.sent + 1
        self.mailboxes[(self.rank + 1) % self.world_size].put((number, send.detach().clone()))
        return _Delivery(self, number, recv)


class _Delivery:
    def __init__(self, ring, number, recv):
        self.ring, self.number, self.recv = ring, number, recv

    def wait(self):
        ring = self.ring
        while self.number not in ring.early:
            number, tensor = ring.mailboxes[ring.rank].get(timeout=TIMEOUT_S)
            ring.early[number] = tensor
        self.recv.copy_(ring.early.pop(self.number))


def run_ranks(world_size, body):
    """[body(ring) for each rank], each rank on its own thread; re-raises the first failure here (a skip too)."""
    mailboxes = [queue.Queue() for _ in range(world_size)]
    results, failures = [None] * world_size, []

    def rank_main(rank):
        try:
            results[rank] = body(SimulatedRing(rank, world_size, mailboxes))
        except BaseException as err:  # noqa: BLE001 - re-raised on the test's thread below
            failures.append(err)

    threads = [threading.Thread(target=rank_main, args=(rank,), daemon=True) for rank in range(world_size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=2 * TIMEOUT_S)
    if failures:
        raise failures[0]
    assert not any(thread.is_alive() for thread in threads), "a simulated rank did not finish"
    return results


def split(t, rank, world_size, causal, dim=1):
    """Rank `rank`'s shard: zig-zag for causal, contiguous blocks otherwise (any split works without a mask)."""
    if causal:
        return zigzag_shard(t, rank, world_size, dim=dim)
    return t.chunk(world_size, dim=dim)[rank].contiguous()


def unsplit(shards, causal, dim=1):
    return zigzag_unshard(shards, dim=dim) if causal else torch.cat(shards, dim=dim)


@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("world_size", [2, 3])
def test_simulated_ring_matches_single_flash4_and_reference(needs_backward, world_size, causal, head_dim):
    check_simulated_ring(world_size, causal, head_dim, seed=100 * world_size + 10 * causal + head_dim // 64)


# The case that failed on the H200, repeated over many inputs. Twice, for two causes: (1) dq error 0.159 against
# a budget of 0.0223 (single-call flash4 at 0.0107): the op layer handed the library a contiguous copy of a
# sliced lse (the ring's second-half query rows) and let go of it before the launch, so another simulated
# rank's allocation on the same stream could take its memory before the kernels read it (test_launch.py checks
# the lifetimes on the CPU; test_gpu_call_forms.py repeats a sliced-lse backward). (2) dv error 0.0639 against
# a budget of 0.0557 at one seed of 200: the budget. Its naive gradients rounded neither P nor dS (the split
# ones) or took delta from unrounded P and dP (the one-piece ones), so neither had the error of a backward
# that rounds P before P^T dO and then sums bf16-rounded steps; naive_backward.py now makes a kernel's roundings.
# An fp32 model of flash4's roundings on the CPU gives a ring dv error equal to the new split naive's on every
# seed tried, up to 2.2 x single-call flash4's.
RING_SEEDS = 200


def test_simulated_ring_over_many_seeds(needs_backward):
    # Fresh inputs on every run; FLASH4_SEED=<first seed> replays a reported run.
    first = int(os.environ.get("FLASH4_SEED") or secrets.randbelow(2**31 - RING_SEEDS))
    for seed in range(first, first + RING_SEEDS):
        try:
            check_simulated_ring(world_size=3, causal=True, head_dim=128, seed=seed)
        except AssertionError as err:
            raise AssertionError(f"seed {seed} (of {first}..{first + RING_SEEDS - 1}): {err}") from None


def check_simulated_ring(world_size, causal, head_dim, seed):
    """The simulated ring's out, lse and gradients against single-call flash4 and the reference (module doc)."""
    # 768 rows: 2W chunks of 192 (W = 2) or 128 (W = 3) rows; GQA 4:1.
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    batch, seqlen, heads_q, heads_kv = 2, 768, 8, 2
    q, k, v = (randn(batch, seqlen, h, head_dim, generator=gen) for h in (heads_q, heads_kv, heads_kv))
    dout = randn(batch, seqlen, heads_q, head_dim, generator=gen)
    scale = head_dim ** -0.5

    def ring_results(local):
        """Gathered (out, lse, dq, dk, dv) of the simulated ring with `local` as every rank's kernel."""

        def rank_body(ring):
            q_local, k_local, v_local, dout_local = (split(t, ring.rank, world_size, causal) for t in (q, k, v, dout))
            out, lse = run(ring_flash_attn_func, q_local, k_local, v_local, ring, causal=causal, return_lse=True,
                           local=local)
            # What the autograd wrapper saves and computes: out in q's dtype, lse fp32, gradients cast back.
            grads = run(ring_backward, dout_local, q_local, k_local, v_local, out, lse, ring, causal, scale, 0.0,
                        local)
            return out, lse, *(g.to(BF16) for g in grads)

        per_rank = run_ranks(world_size, rank_body)
        return [unsplit([r[i] for r in per_rank], causal, dim=2 if i == 1 else 1) for i in range(5)]

    out, lse, dq, dk, dv = ring_results(Flash4Local())
    assert out.dtype == BF16 and lse.dtype == torch.float32 and lse.shape == (batch, heads_q, seqlen)
    split_out, split_lse, *split_grads = ring_results(NaiveLocal())

    single_inputs = [t.clone().requires_grad_() for t in (q, k, v)]
    single_out, single_lse = run(flash_attn_func, *single_inputs, causal=causal, return_lse=True)
    single_grads = torch.autograd.grad(single_out, single_inputs, dout)
    ref_inputs = [t.float().requires_grad_() for t in (q, k, v)]
    ref_out, ref_lse = reference(*ref_inputs, causal)
    ref_grads = torch.autograd.grad(ref_out, ref_inputs, dout.float())
    naive_out, naive_lse = naive_forward(q, k, v, causal)
    naive_grads = naive_gradients(dout, q, k, v, causal)

    check("out", out, single_out, ref_out, naive_out, split_out)
    check("lse", lse, single_lse, ref_lse, naive_lse, split_lse, LSE_FLOOR)
    for name, got, single, ref, naive, naive_split in zip(("dq", "dk", "dv"), (dq, dk, dv), single_grads, ref_grads,
                                                           naive_grads, split_grads):
        check(name, got, single, ref, naive, naive_split)


@pytest.mark.parametrize("causal", [False, True])
def test_world_size_1_through_autograd_is_flash4(needs_backward, causal):
    # One rank: the ring is one flash4 call each way, and the autograd wrapper only casts; with deterministic
    # backward the results are bit-identical to flash_attn_func's.
    gen = torch.Generator(device=DEVICE).manual_seed(7)
    q, k, v = (randn(2, 384, h, 128, generator=gen) for h in (8, 2, 2))
    dout = randn(2, 384, 8, 128, generator=gen)
    ring_inputs = [t.clone().requires_grad_() for t in (q, k, v)]
    out, lse = run(ring_flash_attn_func, *ring_inputs, SimulatedRing(0, 1, [queue.Queue()]), causal=causal,
                   deterministic=True, return_lse=True)
    out.backward(dout)
    single_inputs = [t.clone().requires_grad_() for t in (q, k, v)]
    single_out, single_lse = run(flash_attn_func, *single_inputs, causal=causal, deterministic=True,
                                 return_lse=True)
    single_out.backward(dout)
    assert out.dtype == BF16 and torch.equal(out, single_out)
    assert torch.equal(lse, single_lse)
    for name, ring_input, single_input in zip("qkv", ring_inputs, single_inputs):
        assert ring_input.grad.dtype == BF16, name
        assert torch.equal(ring_input.grad, single_input.grad), f"d{name} differs from flash_attn_func's"
