"""IR kernels on a real GPU, compared with the interp runtime (run with ``-m gpu``; skipped without a GPU).

Kernels are built with the interp tests' IR builder, so these run before the frontend exists.  Set
``CUBEPY_CUDA_FAKE=1`` to run them on ``FakeDriver`` instead (real compiler, launches emulated by the
interp runtime from the packed bytes): a dry run of this file on a machine without a GPU.
"""

from __future__ import annotations

import os

import ml_dtypes
import numpy as np
import pytest

from cubepy.ir import Param, Variable, VarKind
from cubepy.runtime import cuda
from cubepy.runtime.bindings import Bindings, BufferBinding
from cubepy.runtime.handle import Handle

from ..interp.irb import BOOL, F16, F32, I32, I64, U32, Builder, bi, c, launch, line

FAKE = os.environ.get("CUBEPY_CUDA_FAKE") == "1"
REASON = None if FAKE else cuda.unavailable_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(REASON is not None, reason=f"no GPU: {REASON}")]


@pytest.fixture(scope="module")
def gpu():
    """The cuda client (or, with CUBEPY_CUDA_FAKE=1, a client of FakeDriver with the real compiler)."""
    if not FAKE:
        return cuda.make_client()
    from cubepy.compiler.compiled import compile_definition
    from cubepy.runtime.cuda.backend import CudaBackend
    from cubepy.runtime.cuda.client import CudaClient
    from cubepy.runtime.cuda.device import CudaDevice

    from .fake_driver import FakeDriver, InterpLauncher

    definitions: dict = {}

    def compile_and_register(definition, target, *, assemble=True):
        compiled = compile_definition(definition, target, assemble=assemble)
        definitions[compiled.name] = compiled.definition
        return compiled

    fake = FakeDriver()
    fake.launcher = InterpLauncher(definitions)
    device = CudaDevice(0, driver=fake)
    return CudaClient(device, CudaBackend(device, compile_and_register))


def run_on(client, definition, cube_count, arrays, scalars=(), line_sizes=None, roles=None):
    """Launch on ``client`` with fresh copies of ``arrays``; the arrays after the launch."""
    bindings = Bindings()
    handles = []
    for slot, data in enumerate(arrays):
        data = np.asarray(data)
        handle = client.create(data)
        size = (line_sizes or {}).get(slot, 1)
        shape, strides = ((data.size,), (1,)) if (roles or {}).get(slot) != "tensor" else (data.shape, handle.strides)
        bindings.buffers.append(BufferBinding(handle, size, shape, strides))
        handles.append(handle)
    bindings.scalars.extend(scalars)
    kernel = client.backend.prepare(definition)
    cube_count = (cube_count, 1, 1) if isinstance(cube_count, int) else cube_count
    client.backend.check_launch(kernel, cube_count)
    client.backend.run(kernel, cube_count, bindings, sanitize=False)
    return [client.read(h) for h in handles]


def assert_same_as_interp(gpu, definition, cube_count, arrays, scalars=(), line_sizes=None):
    expected = launch(definition, cube_count, arrays, scalars, line_sizes=line_sizes)
    got = run_on(gpu, definition, cube_count, arrays, scalars, line_sizes)
    for slot, (want, have) in enumerate(zip(expected, got)):
        np.testing.assert_array_equal(have.reshape(want.shape), want, err_msg=f"buffer {slot}")


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16, np.int64, np.uint8, np.bool_])
def test_round_trip(gpu, dtype):
    data = (np.arange(1000) % 7).astype(dtype).reshape(10, 100)
    handle = gpu.create(data)
    out = gpu.read(handle)
    assert out.dtype == np.dtype(dtype) and out.shape == (10, 100)
    np.testing.assert_array_equal(out, data)
    assert gpu.read(gpu.empty((4,), np.uint8)).tolist() == [0xCD] * 4


def test_vector_add(gpu):
    b = Builder()
    lhs, rhs, out = b.buffer(F32), b.buffer(F32), b.buffer(F32)
    pos = bi("absolute_pos")
    with b.if_(b.compare("lt", pos, b.meta("len", out))):
        b.store(out, pos, b.binary("add", b.load(lhs, pos), b.load(rhs, pos)))
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(1000).astype(np.float32), rng.standard_normal(1000).astype(np.float32)
    *_, out = run_on(gpu, b.kernel((256, 1, 1), name="vector_add"), 4, [x, y, np.zeros(1000, np.float32)])
    np.testing.assert_array_equal(out, x + y)


def test_scalar_parameters_of_every_width(gpu):
    b = Builder()
    out = b.buffer(F32)
    s_f32, s_bool, s_i64, s_f16 = b.scalar(F32), b.scalar(BOOL), b.scalar(I64), b.scalar(F16)
    b.scalar(line(F32, 3))
    s_u32 = b.scalar(U32)
    for i, value in enumerate([s_f32, b.cast(s_bool, F32), b.cast(s_i64, F32), b.cast(s_f16, F32), b.cast(s_u32, F32)]):
        b.store(out, c(i), value)
    scalars = [np.float32(2.5), np.bool_(True), np.int64(-(2**40)), np.float16(0.75), [1.0, 2.0, 3.0], np.uint32(7)]
    (out,) = run_on(gpu, b.kernel((1, 1, 1), name="scalars"), 1, [np.zeros(5, np.float32)], scalars)
    np.testing.assert_array_equal(out, [2.5, 1.0, -(2.0**40), 0.75, 7.0])


def test_tensor_metadata_and_an_offset_view(gpu):
    b = Builder()
    t, out = Variable(VarKind.GLOBAL, 0, F32), Variable(VarKind.GLOBAL, 1, U32)
    b.params += [Param(t, "t", "tensor", rank=2), Param(out, "out", "array")]
    for i, (name, dim) in enumerate(
        [("shape", 0), ("shape", 1), ("stride", 0), ("stride", 1), ("len", None), ("buffer_len", None), ("rank", None)]
    ):
        b.store(out, c(i), b.meta(name, t, None if dim is None else c(dim)))
    b.store(out, c(7), b.cast(b.load(t, c(5)), U32))
    storage = gpu.create(np.arange(20, dtype=np.float32))
    view = Handle(gpu, storage.storage, np.float32, (3, 4), strides=(5, 1), offset=2)
    results = gpu.zeros((8,), np.uint32)
    kernel = gpu.backend.prepare(b.kernel((1, 1, 1), name="metadata"))
    bindings = Bindings([BufferBinding(view, 1, (3, 4), (5, 1)), BufferBinding(results, 1, (8,), (1,))])
    gpu.backend.run(kernel, (1, 1, 1), bindings, sanitize=False)
    np.testing.assert_array_equal(gpu.read(results), [3, 4, 5, 1, 12, 18, 2, 7])


def test_lines_and_shared_memory(gpu):
    b = Builder()
    inp, out = b.buffer(line(F32, 4)), b.buffer(line(F32, 4))
    smem = b.shared_memory(line(F32, 4), 32)
    unit = bi("unit_pos")
    b.store(smem, unit, b.load(inp, bi("absolute_pos")))
    b.sync_cube()
    b.store(out, bi("absolute_pos"), b.load(smem, b.binary("sub", c(31), unit)))
    data = np.arange(256, dtype=np.float32)
    assert_same_as_interp(
        gpu, b.kernel((32, 1, 1), name="reverse_lines"), 2, [data, np.zeros(256, np.float32)], line_sizes={0: 4, 1: 4}
    )


def test_shared_memory_tree_reduction(gpu):
    units = 128
    b = Builder()
    inp, out = b.buffer(F32), b.buffer(F32)
    smem = b.shared_memory(F32, units)
    unit = bi("unit_pos")
    b.store(smem, unit, b.load(inp, bi("absolute_pos")))
    b.sync_cube()
    stride = b.mut(U32, c(units // 2))
    with b.loop():
        with b.if_(b.compare("eq", stride, c(0))):
            b.break_()
        with b.if_(b.compare("lt", unit, stride)):
            b.store(smem, unit, b.binary("add", b.load(smem, unit), b.load(smem, b.binary("add", unit, stride))))
        b.sync_cube()
        b.assign(stride, b.binary("shr", stride, c(1)))
    with b.if_(b.compare("eq", unit, c(0))):
        b.store(out, bi("cube_pos"), b.load(smem, c(0)))
    data = np.arange(units * 8, dtype=np.float32) % 13  # small integers: every summation order is exact
    assert_same_as_interp(gpu, b.kernel((units, 1, 1), name="tree_sum"), 8, [data, np.zeros(8, np.float32)])


def test_atomic_add_counts_every_unit(gpu):
    b = Builder()
    counter = b.buffer(I32)
    b.atomic("add", counter, c(0, I32), c(1, I32))
    (out,) = run_on(gpu, b.kernel((256, 1, 1), name="count"), 40, [np.zeros(1, np.int32)])
    assert out[0] == 256 * 40


def test_plane_sum(gpu):
    b = Builder()
    inp, out = b.buffer(I32), b.buffer(I32)
    pos = bi("absolute_pos")
    b.store(out, pos, b.plane("sum", b.load(inp, pos)))
    data = np.arange(128, dtype=np.int32)
    assert_same_as_interp(gpu, b.kernel((64, 1, 1), name="plane_sum"), 2, [data, np.zeros(128, np.int32)])


def test_alternating_lengths_reach_the_kernel_by_value(gpu):
    b = Builder()
    inp, out = b.buffer(F32), b.buffer(F32)
    pos = bi("absolute_pos")
    with b.if_(b.compare("lt", pos, b.meta("len", out))):
        b.store(out, pos, b.binary("mul", b.load(inp, pos), c(2.0, F32)))
    kernel = b.kernel((64, 1, 1), name="double")
    for n in (64, 100, 64, 100, 7):
        (_, out) = run_on(gpu, kernel, 2, [np.arange(n, dtype=np.float32), np.zeros(n, np.float32)])
        np.testing.assert_array_equal(out, np.arange(n, dtype=np.float32) * 2)


def test_time_ms(gpu):
    handle = gpu.zeros((1 << 20,), np.float32)
    times = gpu.time_ms(lambda: gpu.device.fill(handle.storage.ptr, 0, handle.storage.nbytes), repeat=3)
    assert len(times) == 3 and all(t >= 0 for t in times)


def test_from_external_torch_tensors_share_memory(gpu):
    torch = pytest.importorskip("torch")
    if FAKE or not torch.cuda.is_available():
        pytest.skip("needs torch with CUDA")
    b = Builder()
    out = b.buffer(F32)
    b.store(out, bi("absolute_pos"), b.cast(bi("absolute_pos"), F32))
    tensor = torch.zeros(256, device="cuda", dtype=torch.float32)
    handle = gpu.from_external(tensor)
    assert handle.storage.ptr == tensor.data_ptr()
    kernel = gpu.backend.prepare(b.kernel((256, 1, 1), name="iota"))
    gpu.backend.run(kernel, (1, 1, 1), Bindings([BufferBinding(handle, 1, (256,), (1,))]), sanitize=False)
    gpu.sync()
    assert torch.equal(tensor.cpu(), torch.arange(256, dtype=torch.float32))
    bf16 = torch.arange(12, device="cuda", dtype=torch.bfloat16).reshape(3, 4)[:, 1:3]  # DLPack: CAI has no bf16
    view = gpu.from_external(bf16)
    assert view.dtype == np.dtype(ml_dtypes.bfloat16) and view.strides == (4, 1)
    np.testing.assert_array_equal(gpu.read(view).astype(np.float32), bf16.float().cpu().numpy())
