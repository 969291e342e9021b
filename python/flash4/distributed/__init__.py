"""flash4.distributed: context parallelism (ring attention) over torch.distributed, flash4 as local kernel.

    from flash4.distributed import ring_flash_attn_func, zigzag_shard
    q_local = zigzag_shard(q, rank, world_size)            # (B, S / W, H, D), likewise k and v
    out_local = ring_flash_attn_func(q_local, k_local, v_local, group, causal=True)

Pieces, each usable on its own: merge_attention (exact LSE merge of partial results), the zig-zag split
(zigzag_shard / zigzag_unshard / zigzag_positions / step_kind), the local kernels (Flash4Local,
ReferenceLocal) and the ring (DistRing, ring_forward / ring_backward). docs/ring-attention.md explains them.
"""

from .local import Flash4Local, ReferenceLocal
from .merge import merge_attention, merge_attention_list
from .ring import DistRing, ring_backward, ring_flash_attn_func, ring_forward
from .zigzag import Step, step_kind, zigzag_chunk_ids, zigzag_positions, zigzag_shard, zigzag_unshard

__all__ = [
    "DistRing",
    "Flash4Local",
    "ReferenceLocal",
    "Step",
    "merge_attention",
    "merge_attention_list",
    "ring_backward",
    "ring_flash_attn_func",
    "ring_forward",
    "step_kind",
    "zigzag_chunk_ids",
    "zigzag_positions",
    "zigzag_shard",
    "zigzag_unshard",
]
