"""The zig-zag split of a sequence over the ranks of a ring, and what each ring step computes.

The global sequence of length S = W * S_local is cut into 2W chunks of c = S / (2W) rows; rank r holds
chunk r followed by chunk 2W-1-r. Under a causal mask every rank then owns one early and one late chunk,
and each of the W ring steps costs every rank the same (c x 2c scores) - the load balance of the zig-zag.

Case analysis for causal attention. At ring step s rank r holds the K/V shard of rank src = (r - s) mod W,
i.e. key chunks src and 2W-1-src, against its query chunks r and 2W-1-r. Query chunk a sees key chunk b
fully when b < a, not at all when b > a, and causally (the diagonal) when b == a. With src, r < W:

    src == r  (step 0)  q r / k r: diagonal     q r / k 2W-1-r: none    -> causal attention of the local
                        q 2W-1-r / k r: full    q 2W-1-r / k 2W-1-r: diagonal   shard on itself (the chunks
                                                                                 are in increasing order)
    src <  r            q r / k src: full       q r / k 2W-1-src: none  -> all local queries against the
                        q 2W-1-r / k src: full  q 2W-1-r / k 2W-1-src: none     first key chunk only
                                                                                 (2W-1-src > 2W-1-r >= W > r)
    src >  r            q r / k src: none       q r / k 2W-1-src: none  -> the second query chunk only,
                        q 2W-1-r / k src: full  q 2W-1-r / k 2W-1-src: full     against both key chunks

Non-causal attention needs no split at all: every step is FULL, on any partition of the sequence.
"""

import enum

import torch

__all__ = ["Step", "step_kind", "zigzag_chunk_ids", "zigzag_positions", "zigzag_shard", "zigzag_unshard"]


class Step(enum.Enum):
    """What one ring step computes on the local (2c-row) query shard and the visiting (2c-row) K/V shard."""

    FULL = "full"  # all queries, all keys, no mask (non-causal)
    DIAGONAL = "diagonal"  # all queries, all keys, causal mask (the rank's own shard)
    FIRST_KEYS = "first_keys"  # all queries, key chunk 0 only (rows [0, c) of K/V), no mask
    SECOND_QUERIES = "second_queries"  # query chunk 1 only (rows [c, 2c) of Q), all keys, no mask


def step_kind(rank, src, causal):
    """The Step of `rank` attending to the K/V shard of rank `src` (zig-zag layout when causal)."""
    if not causal:
        return Step.FULL
    if src == rank:
        return Step.DIAGONAL
    return Step.FIRST_KEYS if src < rank else Step.SECOND_QUERIES


def _check_split(seqlen, world_size, name):
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    if seqlen % (2 * world_size) != 0:
        raise ValueError(
            f"{name} has {seqlen} rows, not a multiple of 2 * world_size = {2 * world_size}: the zig-zag split "
            f"cuts the sequence into 2 chunks per rank of equal length"
        )


def zigzag_chunk_ids(rank, world_size):
    """The two global chunk indices rank `rank` holds, in order."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
    return rank, 2 * world_size - 1 - rank


def zigzag_positions(seqlen, rank, world_size, device=None):
    """Global row indices (int64, length seqlen / world_size) of the rows rank `rank` holds."""
    _check_split(seqlen, world_size, "the sequence")
    chunk = seqlen // (2 * world_size)
    first, second = zigzag_chunk_ids(rank, world_size)
    return torch.cat([torch.arange(i * chunk, (i + 1) * chunk, device=device) for i in (first, second)])


def zigzag_shard(x, rank, world_size, dim=1):
    """The rows of the full-sequence tensor `x` (sequence along `dim`) that rank `rank` holds: a new tensor."""
    _check_split(x.shape[dim], world_size, f"x (dim {dim})")
    chunks = x.chunk(2 * world_size, dim=dim)
    first, second = zigzag_chunk_ids(rank, world_size)
    return torch.cat([chunks[first], chunks[second]], dim=dim)


def zigzag_unshard(shards, dim=1):
    """The full sequence from the W ranks' shards (list in rank order): the inverse of zigzag_shard."""
    world_size = len(shards)
    if world_size == 0:
        raise ValueError("shards is empty")
    halves = [shard.chunk(2, dim=dim) for shard in shards]
    if any(shard.shape[dim] % 2 for shard in shards):
        raise ValueError(f"every shard needs an even length along dim {dim}, got {[s.shape[dim] for s in shards]}")
    ordered = [halves[i][0] for i in range(world_size)] + [halves[i][1] for i in reversed(range(world_size))]
    return torch.cat(ordered, dim=dim)
