"""The path from an op to the C ABI without a GPU: flash4.ops.call_library driven against the stub library
(conftest.STUB_SOURCE), which records the stream and workspace each launch was handed, and the exceptions
a failing status turns into.
"""

import copy
import ctypes
import pickle

import pytest
import torch

from flash4 import Flash4Error, Flash4NotImplementedError, _abi, ops
from flash4._loader import open_library

OPTIONS = ops.Options(softmax_scale=0.125, causal=False, window_left=-1, window_right=-1, softcap=0.0,
                      deterministic=True)
# A handle above 2**32, as real cudaStream_t values are: a 32-bit int on the way would lose its top half.
STREAM = 0x7F3A_1234_5670


@pytest.fixture
def stub(stub_library):
    lib = open_library(stub_library)
    for name in ("stub_seen_stream", "stub_seen_workspace", "stub_seen_workspace_bytes"):
        getattr(lib, name).restype = ctypes.c_size_t
        getattr(lib, name).argtypes = []
    return lib


class Allocations:
    """allocate(bytes) for call_library: CPU uint8 tensors, remembered."""

    def __init__(self):
        self.tensors = []

    def __call__(self, size):
        tensor = torch.empty(size, dtype=torch.uint8)
        self.tensors.append(tensor)
        return tensor


def fwd_params(heads_kv=2):
    q = torch.zeros(1, 16, 4, 64, dtype=torch.bfloat16)
    k = torch.zeros(1, 16, heads_kv, 64, dtype=torch.bfloat16)
    return ops.fwd_params(q, k, k, q, torch.zeros(1, 4, 16), OPTIONS)


def bwd_params():
    q = torch.zeros(1, 16, 4, 64, dtype=torch.bfloat16)
    k = torch.zeros(1, 16, 2, 64, dtype=torch.bfloat16)
    return ops.bwd_params(q, q, k, k, q, torch.zeros(1, 4, 16), q, k, k, OPTIONS)


def test_forward_launch_gets_the_full_stream_handle_and_no_workspace(stub):
    allocate = Allocations()
    error, workspace = ops.call_library(stub, "fwd", fwd_params(), STREAM, allocate)
    assert error is None and workspace is None and allocate.tensors == []
    assert stub.stub_seen_stream() == STREAM
    assert (stub.stub_seen_workspace(), stub.stub_seen_workspace_bytes()) == (0, 0)


def test_the_legacy_stream_is_passed_as_null(stub):
    error, _ = ops.call_library(stub, "fwd", fwd_params(), 0, Allocations())
    assert error is None and stub.stub_seen_stream() == 0


def test_backward_allocates_the_workspace_it_asks_for_and_reports_not_implemented(stub):
    allocate = Allocations()
    params = bwd_params()
    error, workspace = ops.call_library(stub, "bwd", params, STREAM, allocate)
    assert allocate.tensors == [workspace] and workspace.numel() == 4096 and workspace.dtype == torch.uint8
    assert (params.workspace, params.workspace_bytes) == (workspace.data_ptr(), 4096)
    assert stub.stub_seen_workspace() == workspace.data_ptr() and stub.stub_seen_workspace_bytes() == 4096
    assert stub.stub_seen_stream() == STREAM
    assert isinstance(error, Flash4NotImplementedError) and isinstance(error, NotImplementedError)
    assert error.status == _abi.Status.ERROR_NOT_IMPLEMENTED
    assert str(error) == ("flash4_bwd failed with FLASH4_ERROR_NOT_IMPLEMENTED (status 15): "
                          "flash4_bwd: the backward kernel is not in this release")


def test_a_failing_size_query_allocates_and_launches_nothing(stub):
    allocate = Allocations()
    stub.flash4_fwd(ctypes.byref(fwd_params()), ctypes.c_void_p(1))  # a launch the next call must not repeat
    error, workspace = ops.call_library(stub, "fwd", fwd_params(heads_kv=3), STREAM, allocate)
    assert workspace is None and allocate.tensors == []
    assert stub.stub_seen_stream() == 1  # flash4_fwd was not called again
    assert type(error) is Flash4Error and error.status == _abi.Status.ERROR_HEAD_RATIO
    assert str(error).startswith("flash4_fwd_workspace_size failed with FLASH4_ERROR_HEAD_RATIO (status 5): heads_q")


def test_errors_are_plain_values():
    # Raised from inside a custom op, an error crosses torch's dispatcher and may be copied, pickled or
    # re-created as type(e)(*e.args) (tracing does this); each must keep the message and the status.
    for error in (Flash4Error("flash4_fwd failed: softmax_scale is -1", 11),
                  Flash4NotImplementedError("flash4_bwd failed", _abi.Status.ERROR_NOT_IMPLEMENTED)):
        for clone in (copy.copy(error), pickle.loads(pickle.dumps(error)), type(error)(*error.args)):
            assert type(clone) is type(error)
            assert (str(clone), clone.status) == (str(error), error.status)
            assert type(clone.status) is int


def test_check_raises_the_error_and_passes_success(stub):
    _abi.check(stub, "flash4_fwd_check", _abi.Status.SUCCESS)
    status = stub.flash4_fwd_check(ctypes.byref(fwd_params(heads_kv=3)))
    with pytest.raises(Flash4Error, match="flash4_fwd_check failed with FLASH4_ERROR_HEAD_RATIO") as info:
        _abi.check(stub, "flash4_fwd_check", status)
    assert info.value.status == _abi.Status.ERROR_HEAD_RATIO
