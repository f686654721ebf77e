"""The cuda client and back end against ``FakeDriver``: memory, launches, errors, interop, on any machine.

Launches run on the interp runtime from the parameter and info bytes the GPU would read
(``InterpLauncher``), so these tests check the whole binding path, not only that calls happen.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from cubepy.errors import CubeError, LaunchError
from cubepy.ir import Param, Variable, VarKind
from cubepy.runtime.bindings import Bindings, BufferBinding
from cubepy.runtime.cuda.backend import CudaBackend
from cubepy.runtime.cuda.client import CudaClient, make_cuda_client
from cubepy.runtime.cuda.device import CudaDevice, DeviceBuffer
from cubepy.runtime.cuda.interop import DLPACK_CPU, from_dlpack
from cubepy.runtime.handle import Handle
from cubepy.runtime.tensormap import TensorMapArg

from ..interp.irb import BOOL, F16, F32, I64, U32, Builder, bi, c, line
from .fake_driver import FakeDriver, InterpLauncher, fake_compiler


@pytest.fixture
def fake():
    return FakeDriver()


def make_client(fake: FakeDriver, **compiler_options) -> CudaClient:
    definitions: dict = {}
    fake.launcher = InterpLauncher(definitions)
    device = CudaDevice(0, driver=fake)
    return CudaClient(device, CudaBackend(device, fake_compiler(definitions, **compiler_options)))


def launch(client: CudaClient, definition, cube_count, buffers=(), scalars=(), tensor_maps=()):
    """Bind handles and values the way ``ComputeClient.launch`` does, through the back end's three steps."""
    bindings = Bindings()
    for handle, line_size, shape, strides in buffers:
        bindings.buffers.append(BufferBinding(handle, line_size, shape, strides))
    bindings.scalars.extend(scalars)
    bindings.tensor_maps.extend(tensor_maps)
    kernel = client.backend.prepare(definition)
    client.backend.check_launch(kernel, cube_count)
    client.backend.run(kernel, cube_count, bindings, sanitize=False)
    return kernel


def array(handle: Handle, line_size: int = 1):
    return (handle, line_size, (handle.size,), (1,))


# -- device and memory -----------------------------------------------------------------------------


def test_device_info_and_target(fake):
    device = CudaDevice(0, driver=fake)
    assert device.info.name == "Fake H200"
    assert device.info.compute_capability == (9, 0) and device.info.target == "sm_90a"
    assert device.info.driver_version_text == "13.0"
    assert device.info.max_shared_per_block_optin == 227 * 1024
    assert fake.called("cuStreamCreate") == [(0,)]  # a blocking stream: ordered with the legacy stream


def test_other_architectures_get_plain_targets():
    device = CudaDevice(0, driver=FakeDriver({"COMPUTE_CAPABILITY_MAJOR": 8, "COMPUTE_CAPABILITY_MINOR": 9}))
    assert device.info.target == "sm_89"


def test_create_read_empty_zeros(fake):
    client = make_client(fake)
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    handle = client.create(data)
    assert isinstance(handle.storage, DeviceBuffer) and handle.storage.ptr % 256 == 0
    assert handle.size == 12 and handle.shape == (3, 4) and handle.dtype == np.float32
    np.testing.assert_array_equal(client.read(handle), data)
    assert client.read(client.empty((5,), np.uint8)).tolist() == [0xCD] * 5
    assert client.read(client.zeros((2, 2), np.int32)).tolist() == [[0, 0], [0, 0]]
    assert fake.called("cuStreamSynchronize"), "read waits for the stream"


def test_strided_and_offset_handles_read_like_the_cpu_runtime(fake):
    client = make_client(fake)
    base = client.create(np.arange(20, dtype=np.float32))
    view = Handle(client, base.storage, np.float32, (3, 4), strides=(5, 1), offset=2)
    np.testing.assert_array_equal(
        client.read(view), np.arange(20, dtype=np.float32)[2:].reshape(-1)[np.arange(3)[:, None] * 5 + np.arange(4)]
    )


def test_a_handle_view_launches_as_pointer_plus_offset_and_writes_only_its_range(fake):
    client = make_client(fake)
    parent = client.create(np.zeros(100, np.float32))
    view = parent[40:60]
    ones = client.create(np.ones(20, np.float32))
    launch(client, vector_add(), (1, 1, 1), [array(ones), array(ones), array(view)])
    expected = np.zeros(100, np.float32)
    expected[40:60] = 2
    np.testing.assert_array_equal(client.read(parent), expected)
    assert record_pointer(fake, 2) == parent.storage.ptr + 40 * 4


def record_pointer(fake: FakeDriver, slot: int) -> int:
    """The device address the launch passed for buffer ``slot``."""
    (record,) = fake.launches
    return int(np.frombuffer(ctypes.string_at(record.pointers[slot], 8), np.uint64)[0])


def test_allocations_are_freed_with_their_handles(fake):
    client = make_client(fake)
    handle = client.zeros((1000,), np.float32)
    ptr = handle.storage.ptr
    del handle
    import gc

    gc.collect()
    assert ptr in fake.freed


def test_sanitize_is_refused(fake):
    with pytest.raises(CubeError, match="the sanitizer is a CPU-runtime feature"):
        make_cuda_client(CudaDevice(0, driver=fake), sanitize=True)
    client = make_client(fake)
    b = Builder()
    b.store(b.buffer(U32), c(0), c(1))
    kernel = client.backend.prepare(b.kernel())
    with pytest.raises(CubeError, match="the sanitizer is a CPU-runtime feature"):
        client.backend.run(
            kernel, (1, 1, 1), Bindings([BufferBinding(client.zeros(1, np.uint32), 1, (1,), (1,))]), sanitize=True
        )


# -- launches ----------------------------------------------------------------------------------------


def vector_add():
    b = Builder()
    lhs, rhs, out = b.buffer(F32), b.buffer(F32), b.buffer(F32)
    pos = bi("absolute_pos")
    with b.if_(b.compare("lt", pos, b.meta("len", out))):
        b.store(out, pos, b.binary("add", b.load(lhs, pos), b.load(rhs, pos)))
    return b.kernel((64, 1, 1), name="vector_add")


def test_vector_add_runs_from_the_bytes_the_gpu_reads(fake):
    client = make_client(fake)
    x, y = np.arange(100, dtype=np.float32), np.full(100, 0.5, np.float32)
    hx, hy, out = client.create(x), client.create(y), client.empty((100,), np.float32)
    kernel = launch(client, vector_add(), (2, 1, 1), [array(hx), array(hy), array(out)])
    np.testing.assert_array_equal(client.read(out), x + y)
    (record,) = fake.launches
    assert record.grid == (2, 1, 1) and record.block == (64, 1, 1) and record.shared == 0
    assert kernel.loaded_from == "cubin" and kernel.name == "vector_add"
    assert fake.called("cuLaunchKernel")[0][8] == client.device.stream


def test_scalars_of_every_width_reach_the_kernel(fake):
    client = make_client(fake)
    b = Builder()
    out = b.buffer(F32)
    s_f32, s_bool, s_i64, s_f16 = b.scalar(F32), b.scalar(BOOL), b.scalar(I64), b.scalar(F16)
    b.scalar(line(F32, 3))  # padding between the others
    b.store(out, c(0), s_f32)
    b.store(out, c(1), b.cast(s_bool, F32))
    b.store(out, c(2), b.cast(s_i64, F32))
    b.store(out, c(3), b.cast(s_f16, F32))
    handle = client.zeros((4,), np.float32)
    launch(
        client,
        b.kernel((1, 1, 1)),
        (1, 1, 1),
        [array(handle)],
        [np.float32(2.5), np.bool_(True), np.int64(-(2**40)), np.float16(0.75), [1.0, 2.0, 3.0]],
    )
    np.testing.assert_array_equal(client.read(handle), [2.5, 1.0, -(2.0**40), 0.75])


def test_tensor_metadata_and_offsets_come_through_the_parameters(fake):
    client = make_client(fake)
    b = Builder()
    t, out = Variable(VarKind.GLOBAL, 0, F32), Variable(VarKind.GLOBAL, 1, U32)
    b.params += [Param(t, "t", "tensor", rank=2), Param(out, "out", "array")]  # irb makes arrays only
    for i, (name, dim) in enumerate(
        [("shape", 0), ("shape", 1), ("stride", 0), ("stride", 1), ("len", None), ("buffer_len", None), ("rank", None)]
    ):
        b.store(out, c(i), b.meta(name, t, None if dim is None else c(dim)))
    b.store(out, c(7), b.cast(b.load(t, c(0)), U32))
    storage = client.create(np.arange(20, dtype=np.float32))
    view = Handle(client, storage.storage, np.float32, (3, 4), strides=(5, 1), offset=2)
    results = client.zeros((8,), np.uint32)
    launch(client, b.kernel((1, 1, 1)), (1, 1, 1), [(view, 1, (3, 4), (5, 1)), array(results)])
    np.testing.assert_array_equal(client.read(results), [3, 4, 5, 1, 12, 18, 2, 2])


def test_lines_and_shared_memory(fake):
    client = make_client(fake)
    b = Builder()
    inp, out = b.buffer(line(F32, 4)), b.buffer(line(F32, 4))
    smem = b.shared_memory(line(F32, 4), 32)
    unit = bi("unit_pos")
    b.store(smem, unit, b.load(inp, bi("absolute_pos")))
    b.sync_cube()
    b.store(out, bi("absolute_pos"), b.load(smem, b.binary("sub", c(31), unit)))
    data = np.arange(256, dtype=np.float32)
    hin, hout = client.create(data), client.zeros((256,), np.float32)
    launch(client, b.kernel((32, 1, 1)), (2, 1, 1), [(hin, 4, (256,), (1,)), (hout, 4, (256,), (1,))])
    expected = data.reshape(2, 32, 4)[:, ::-1, :].reshape(-1)
    np.testing.assert_array_equal(client.read(hout), expected)


def test_metadata_travels_in_the_parameters_without_any_upload(fake):
    client = make_client(fake)
    x = client.create(np.ones(64, np.float32))
    out = client.empty((64,), np.float32)
    kernel = vector_add()
    launch(client, kernel, (1, 1, 1), [array(x), array(x), array(out)])
    uploads = len(fake.called("cuMemcpyHtoDAsync"))
    small, small_out = client.create(np.ones(32, np.float32)), client.empty((32,), np.float32)
    launch(client, kernel, (1, 1, 1), [array(small), array(small), array(small_out)])
    assert len(fake.called("cuMemcpyHtoDAsync")) == uploads + 1  # the new data only: lengths go by value
    np.testing.assert_array_equal(client.read(small_out), np.full(32, 2, np.float32))
    # buffer_len and len of each of the three buffers, after the three pointers
    assert [int.from_bytes(raw, "little") for raw in fake.launches[-1].param_bytes[3:]] == [32] * 6


def test_tensor_map_descriptors_sit_64_aligned_in_the_parameters(fake):
    client = make_client(fake)
    b = Builder()
    b.params.append(Param(Variable(VarKind.TENSOR_MAP, 0, F16), "tmap", "tensor_map"))
    out = b.buffer(U32)
    b.store(out, c(0), c(1))
    source = client.create(np.zeros((64, 128), np.float16))
    offset_view = Handle(client, source.storage, np.float16, (32, 128), offset=64 * 16)
    tmap = TensorMapArg.tiled(offset_view, (16, 64))
    result = client.zeros((1,), np.uint32)
    launch(client, b.kernel((32, 1, 1)), (1, 1, 1), [array(result)], tensor_maps=[tmap])
    (args,) = fake.called("cuTensorMapEncodeTiled")
    assert args[2] == source.storage.ptr + 64 * 16 * 2  # the view's first element, not the allocation's
    (record,) = fake.launches
    assert record.pointers[0] % 64 == 0
    assert len(set(record.param_bytes[0])) == 1 and len(record.param_bytes[0]) == 128  # the fake's descriptor


def test_ptx_is_jitted_when_there_is_no_cubin(fake):
    client = make_client(fake, cubin=False)
    kernel = client.backend.prepare(vector_add())
    assert kernel.loaded_from == "ptx"
    (args,) = fake.called("cuModuleLoadDataEx")
    assert args[0].endswith(b"\0") and args[0].startswith(b"// fake PTX")


def test_a_refused_cubin_falls_back_to_the_ptx(fake):
    client = make_client(fake)
    fake.failures["cuModuleLoadData"] = "CUDA_ERROR_NO_BINARY_FOR_GPU"
    assert client.backend.prepare(vector_add()).loaded_from == "ptx"


def test_a_jit_failure_reports_the_log(fake):
    client = make_client(fake, cubin=False)
    fake.failures["cuModuleLoadDataEx"] = "CUDA_ERROR_INVALID_PTX"
    fake.jit_log = b"ptxas fatal: Unexpected instruction\0"
    with pytest.raises(
        CubeError,
        match=r"(?s)cuModuleLoadDataEx \(PTX JIT\) failed: CUDA_ERROR_INVALID_PTX.*"
        r"Unexpected instruction",
    ):
        client.backend.prepare(vector_add())


def test_dynamic_shared_memory_opts_in_and_is_passed_to_the_launch(fake):
    client = make_client(fake, dynamic_shared=100 * 1024)
    x = client.zeros((64,), np.float32)
    launch(client, vector_add(), (1, 1, 1), [array(x), array(x), array(x)])
    ((function, attr, value),) = fake.called("cuFuncSetAttribute")
    assert attr.key == "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES" and value == 100 * 1024
    assert fake.launches[0].shared == 100 * 1024


@pytest.mark.parametrize(
    "function_attributes, cube_count, message",
    [
        ({}, (1, 70000, 1), r"cube_count.y = 70000 exceeds the device's limit of 65535"),
        (
            {"MAX_THREADS_PER_BLOCK": 32, "NUM_REGS": 255},
            (1, 1, 1),
            r"has 64 units but the compiled kernel allows at most 32 per cube \(255 registers per unit\)",
        ),
        (
            {"SHARED_SIZE_BYTES": 240 * 1024},
            (1, 1, 1),
            r"needs 245760 bytes of shared memory; a cube has at most 232448",
        ),
    ],
)
def test_launches_the_device_would_refuse_are_launch_errors(function_attributes, cube_count, message):
    fake = FakeDriver(function_attributes=function_attributes)
    client = make_client(fake)
    kernel = client.backend.prepare(vector_add())
    with pytest.raises(LaunchError, match=message):
        client.backend.check_launch(kernel, cube_count)


@pytest.mark.parametrize(
    "cube_dim, message",
    [
        ((1, 1, 128), r"cube_dim.z = 128 exceeds CUDA's limit of 64"),
        ((2048, 1, 1), r"cube_dim.x = 2048 exceeds CUDA's limit of 1024"),
    ],
)
def test_per_axis_cube_limits_are_launch_errors_on_the_cuda_runtime(fake, cube_dim, message):
    b = Builder()
    out = b.buffer(F32)
    b.store(out, c(0), c(1.0, F32))
    client = make_client(fake)
    kernel = client.backend.prepare(b.kernel(cube_dim))
    with pytest.raises(LaunchError, match=message):
        client.backend.check_launch(kernel, (1, 1, 1))
    with pytest.raises(LaunchError, match=message):  # the client checks before it touches the kernel
        client.launch(None, (1, 1, 1), cube_dim, ())


def test_driver_failures_name_the_call(fake):
    client = make_client(fake)
    x = client.zeros((64,), np.float32)
    fake.failures["cuLaunchKernel"] = "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"
    with pytest.raises(
        CubeError,
        match=r"cuLaunchKernel failed: CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES .*"
        r"cube_dim.*\n.*kernel vector_add",
    ):
        launch(client, vector_add(), (1, 1, 1), [array(x), array(x), array(x)])
    fake.failures["cuStreamSynchronize"] = "CUDA_ERROR_ILLEGAL_ADDRESS"
    with pytest.raises(CubeError, match=r"cuStreamSynchronize failed: CUDA_ERROR_ILLEGAL_ADDRESS"):
        client.sync()


def test_handles_of_another_client_are_refused(fake):
    client = make_client(fake)
    cpu_handle = Handle(None, np.zeros(4, np.float32), np.float32, (4,))
    kernel = client.backend.prepare(vector_add())
    bindings = Bindings([BufferBinding(cpu_handle, 1, (4,), (1,))] * 3)
    with pytest.raises(LaunchError, match="does not live in device memory"):
        client.backend.run(kernel, (1, 1, 1), bindings, sanitize=False)
    assert not fake.launches


def test_time_ms_uses_events_on_the_stream(fake):
    client = make_client(fake)
    calls = []
    assert client.time_ms(lambda: calls.append(1), repeat=3, warmup=2) == [0.5, 0.5, 0.5]
    assert len(calls) == 5 and len(fake.called("cuEventRecord")) == 6
    assert all(args[1] == client.device.stream for args in fake.called("cuEventRecord"))


# -- interop --------------------------------------------------------------------------------------------


class CudaArrayInterfaceExporter:
    """What CuPy or PyTorch expose, pointing at a fake device allocation."""

    def __init__(self, ptr: int, shape, typestr: str, strides=None) -> None:
        self.__cuda_array_interface__ = {
            "shape": shape,
            "typestr": typestr,
            "data": (ptr, False),
            "strides": strides,
            "version": 3,
            "stream": 1,
        }


def test_from_external_borrows_a_cuda_array_interface_without_copying(fake):
    client = make_client(fake)
    owner = client.create(np.arange(24, dtype=np.float32))
    exporter = CudaArrayInterfaceExporter(owner.storage.ptr + 8, (2, 3), "<f4", strides=(32, 4))
    uploads = len(fake.called("cuMemcpyHtoDAsync"))
    handle = client.from_external(exporter)
    assert len(fake.called("cuMemcpyHtoDAsync")) == uploads
    assert handle.storage.ptr == owner.storage.ptr + 8 and handle.storage.owner is exporter
    assert handle.strides == (8, 1) and handle.shape == (2, 3)
    np.testing.assert_array_equal(client.read(handle), [[2, 3, 4], [10, 11, 12]])
    assert fake.called("cuCtxSynchronize"), "the exporter's queued work is waited for"


def test_from_external_refuses_host_arrays(fake):
    client = make_client(fake)
    with pytest.raises(LaunchError, match="not on a CUDA device"):
        client.from_external(np.zeros(4, np.float32))
    with pytest.raises(LaunchError, match="neither __cuda_array_interface__ nor __dlpack__"):
        client.from_external([1, 2, 3])


def test_dlpack_views_read_the_exporters_struct():
    data = np.arange(24, dtype=np.int16).reshape(4, 6)[:, 1:5]
    view = from_dlpack(data)
    assert view.device_type == DLPACK_CPU
    assert view.ptr == data.ctypes.data and view.dtype == np.int16
    assert view.shape == (4, 4) and view.strides == (6, 1) and view.span == 22
    copied = np.ctypeslib.as_array((ctypes.c_int16 * view.span).from_address(view.ptr))
    assert copied[6] == data[1, 0]


class Bf16LikeTorch:
    """PyTorch raises TypeError for a bf16 tensor's __cuda_array_interface__; DLPack must be used instead."""

    def __init__(self, data: np.ndarray) -> None:
        self.data = data

    @property
    def __cuda_array_interface__(self):
        raise TypeError("Got unsupported ScalarType BFloat16")

    def __dlpack__(self, stream=None):
        return self.data.__dlpack__()


def test_an_exporter_refusing_its_cuda_array_interface_falls_back_to_dlpack(fake):
    client = make_client(fake)
    with pytest.raises(LaunchError, match="DLPack device type 1, not on a CUDA device"):
        client.from_external(Bf16LikeTorch(np.zeros(4, np.float32)))


class StubKernel:
    """The slice of a frontend kernel that ``ComputeClient.launch`` uses, around a fixed definition."""

    def __init__(self, definition) -> None:
        self.definition = definition
        self.name = definition.name
        self.identity = ("stub", definition.name)
        self.contract = None  # the decorator's choice: CUBEPY_CONTRACT's

    def compilation_args(self, args, cubes=None) -> tuple:
        return tuple(type(a).__name__ for a in args)

    def register(self, args, bindings: Bindings) -> None:
        for handle in args:
            bindings.buffers.append(BufferBinding(handle, 1, (handle.size,), (1,)))

    def define(self, comp_args, cube_dim, checked, contract=None):
        return self.definition


def test_compute_client_launch_drives_the_backend(fake):
    client = make_client(fake)
    kernel = StubKernel(vector_add())
    x, out = client.create(np.arange(64, dtype=np.float32)), client.zeros((64,), np.float32)
    for _ in range(2):
        client.launch(kernel, 1, 64, (x, x, out))
    np.testing.assert_array_equal(client.read(out), 2 * np.arange(64, dtype=np.float32))
    assert client.stats == {"hits": 1, "misses": 1} and len(fake.called("cuModuleLoadData")) == 1
    client.launch(kernel, 0, 64, (x, x, out))  # an empty grid launches nothing
    assert len(fake.launches) == 2
    with pytest.raises(LaunchError, match="belongs to another client"):
        client.launch(kernel, 1, 64, (x, x, make_client(FakeDriver()).zeros((64,), np.float32)))
