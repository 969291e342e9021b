"""The eager path: flash4's C calls from plain Python, without torch's dispatcher in between.

At small shapes (decoding, batches of short sequences) the time to enqueue a call sets the speed. A
torch.library.custom_op call runs several Python <-> C++ round trips through the dispatcher (and an autograd
wrapper around them) before its Python kernel starts; here the forward is one torch.autograd.Function (or no
autograd at all when no input needs a gradient) around flash4._launch, and the backward returns the gradients
in the layout of the inputs autograd saw (one dqkv for a packed qkv, as FlashAttention does: the kernels write
dq, dk and dv apart and they are copied into it).

Used only when torch needs to see nothing (eager_call()); otherwise the public functions call the torch ops
(flash4.ops), whose kernels run the same flash4._launch functions. The GPU tests compare the two paths.
"""

import torch

from . import _launch


# Types that intercept nothing (a Parameter disables __torch_function__); other subclasses may.
_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)


def eager_call(*tensors):
    """Whether a call on `tensors` may bypass the dispatcher: not while torch.compile traces (the graph must
    hold the op), not for tensor subclasses or fake tensors, not under a TorchDispatchMode (they intercept
    ops: FakeTensorMode, FlopCounterMode) and not inside functorch transforms (vmap, grad)."""
    if torch.compiler.is_compiling():
        return False
    for t in tensors:
        if type(t) not in _PLAIN_TENSORS:
            return False
    return not torch._C._len_torch_dispatch_stack() and not torch._C._are_functorch_transforms_active()


class Call:
    """What one attention call computes, besides its differentiable tensors: options, varlen metadata, the
    rows each sequence uses (seqused_q, seqused_k or None), and how the differentiable inputs (q, k, v; or a
    packed qkv; or q and a packed kv) split into q, k and v. Under autograd, _Attention.forward leaves the lse
    it computed in `lse`."""

    __slots__ = ("options", "varlen", "split", "seqused", "lse")

    def __init__(self, options, varlen, split, seqused=(None, None)):
        self.options, self.varlen, self.split, self.seqused = options, varlen, split, seqused
        self.lse = None

    def extras(self, sink32):
        return _launch.Extras(sink32, *self.seqused)


def attention(call, *inputs, sink=None):
    """(out, lse) of `call` on its differentiable inputs and learnable sink logits (a (Hq,) tensor or None),
    through autograd when one of them needs a gradient."""
    if torch.is_grad_enabled():
        for t in (*inputs, sink):
            if t is not None and t.requires_grad:
                out = _Attention.apply(call, sink, *inputs)
                lse, call.lse = call.lse, None  # the graph keeps `call`: it need not keep the lse too
                return out, lse
    return _launch.forward(*call.split(*inputs), call.options, call.varlen, extras=call.extras(kernel_sinks(sink)))


def kernel_sinks(sink):
    """The sink logits as the kernels read them: float32, contiguous (FlashAttention-4 also takes bf16/fp16)."""
    return None if sink is None else sink.detach().to(torch.float32).contiguous()


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, call, sink, *inputs):
        sink32 = kernel_sinks(sink)
        out, lse = _launch.forward(*call.split(*inputs), call.options, call.varlen, extras=call.extras(sink32))
        ctx.save_for_backward(*inputs, out, lse, sink32)
        ctx.call = call
        ctx.sink_dtype = None if sink is None else sink.dtype
        # lse is an auxiliary result, as in FlashAttention: it takes no gradient, so it leaves through `call`
        # rather than as a second output, which autograd would wrap (and materialize a gradient for) on
        # every call.
        call.lse = lse
        return out

    @staticmethod
    def backward(ctx, dout):
        *inputs, out, lse, sink32 = ctx.saved_tensors
        call = ctx.call
        extras = call.extras(sink32)
        dsink = None if sink32 is None else torch.empty_like(sink32)
        separate = _launch.backward(dout, *call.split(*inputs), out, lse, call.options, call.varlen, extras,
                                    dsink)
        dsink = None if dsink is None else dsink.to(ctx.sink_dtype)
        if call.split is unpacked:
            return (None, dsink, *separate)
        # A packed input's gradient is one packed tensor. The kernels write dq, dk and dv apart and they are
        # copied into it: written in place through the split, they would interleave in one buffer, which the
        # C ABI rejects as overlapping outputs (its rule is a sufficient test of overlap, not an exact one).
        grads = tuple(torch.empty(t.shape, dtype=t.dtype, device=t.device) for t in inputs)
        for view, grad in zip(call.split(*grads), separate):
            view.copy_(grad)
        return (None, dsink, *grads)


def unpacked(q, k, v):
    return q, k, v
