"""The cuda runtime's parts that need no GPU: availability, the parameter ABI, tensor-map arguments.

The packing is checked against the PTX the compiler really emits (``.param`` sizes and alignments),
and the driver-argument conversions against the installed cuda-bindings when there is one: on a
machine without a driver its calls still convert every argument before failing to find libcuda, so a
type mistake shows up here as a TypeError.
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import ml_dtypes
import numpy as np
import pytest

from cubepy.errors import CubeError, LaunchError, TensorMapError
from cubepy.ir import Param, Variable, VarKind
from cubepy.runtime import cuda
from cubepy.runtime import params as kparams
from cubepy.runtime.cuda import driver as cuda_driver
from cubepy.runtime.cuda import tensormaps
from cubepy.runtime.handle import Handle
from cubepy.runtime.tensormap import CU_ENUM_VALUES, TensorMapArg

from ..interp.irb import BOOL, F16, F32, I64, U8, Builder, bi, line
from .fake_driver import U32 as FakeU32
from .fake_driver import U64 as FakeU64
from .fake_driver import FakeDriver

REASON = cuda.unavailable_reason()


def real_driver_module():
    """cuda-bindings' driver module, or skip."""
    try:
        return cuda_driver.import_driver()
    except ImportError:
        pytest.skip(cuda_driver.NOT_INSTALLED)


# -- availability ---------------------------------------------------------------------------------


def test_unavailable_reason_is_a_string_or_none_and_never_raises():
    reason = cuda.unavailable_reason()
    assert reason is None or (isinstance(reason, str) and reason)


@pytest.mark.skipif(REASON is None, reason="a CUDA device is available here")
def test_client_cuda_raises_with_the_reason():
    import cubepy
    from cubepy.runtime.client import client as runtime_client

    make = getattr(cubepy, "client", runtime_client)
    with pytest.raises(CubeError, match=re.escape(REASON)):
        make("cuda")


def test_make_client_refuses_the_sanitizer_before_touching_a_device():
    with pytest.raises(CubeError, match="the sanitizer is a CPU-runtime feature"):
        cuda.make_client(sanitize=True)


def _fake_module(init=(0,), count=(0, 1), init_raises=None):
    module = FakeDriver()

    def cu_init(flags):
        if init_raises is not None:
            raise init_raises
        return init

    module.cuInit = cu_init
    module.cuDeviceGetCount = lambda: count
    return module


def _missing():
    raise ImportError("No module named 'cuda'")


def _no_library():
    raise OSError("libcuda.so.1: cannot open shared object file")


@pytest.mark.parametrize(
    "importer, loader, expected",
    [
        (_missing, lambda: None, cuda_driver.NOT_INSTALLED),
        (lambda: _fake_module(), _no_library, cuda_driver.NO_DRIVER),
        (lambda: _fake_module(init=(100,)), lambda: None, cuda_driver.NO_DEVICE),
        (lambda: _fake_module(init=(3,)), lambda: None, "cuInit failed: CUDA_ERROR_UNKNOWN"),
        (lambda: _fake_module(init_raises=RuntimeError("loader")), lambda: None, "cuInit failed: RuntimeError: loader"),
        (lambda: _fake_module(count=(0, 0)), lambda: None, cuda_driver.NO_DEVICE),
        (lambda: _fake_module(), lambda: None, None),
    ],
)
def test_probe_reports_each_missing_piece(importer, loader, expected):
    assert cuda_driver.probe(importer, loader) == expected


def test_check_unpacks_results_and_names_failed_calls():
    fake = FakeDriver()
    assert cuda_driver.check(fake, (0,), "cuX") is None
    assert cuda_driver.check(fake, (0, 7), "cuX") == 7
    assert cuda_driver.check(fake, (0, 7, 8), "cuX") == (7, 8)
    with pytest.raises(CubeError) as info:
        cuda_driver.check(fake, (700,), "cuStreamSynchronize", "after kernel k")
    text = str(info.value)
    assert text.startswith("cuStreamSynchronize failed: CUDA_ERROR_ILLEGAL_ADDRESS")
    assert "sanitize=True" in text and "restart the process" in text and text.endswith("after kernel k")
    with pytest.raises(LaunchError, match="cuLaunchKernel failed: CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"):
        cuda_driver.check(fake, (701,), "cuLaunchKernel", error=LaunchError)


def test_error_names_come_from_the_real_enum_when_cuGetErrorName_cannot_run():
    driver = real_driver_module()
    assert cuda_driver.error_name(driver, driver.CUresult(700)) == "CUDA_ERROR_ILLEGAL_ADDRESS"


# -- the parameter ABI ----------------------------------------------------------------------------


def abi_kernel():
    """A kernel with every kind of parameter, in an order that needs padding (unused ones stay in the entry)."""
    b = Builder()
    out = b.buffer(F32, "out")
    s_u8 = b.scalar(U8, "small")
    b.params.append(Param(Variable(VarKind.TENSOR_MAP, 0, F32), "tmap", "tensor_map"))
    s_bool = b.scalar(BOOL, "flag")
    b.scalar(line(F32, 3), "vec3")
    s_i64 = b.scalar(I64, "big")
    s_half = b.scalar(F16, "half")
    b.scalar(line(U8, 3), "bytes3")
    value = b.binary("add", b.cast(s_u8, F32), b.cast(s_i64, F32))
    value = b.binary("add", value, b.cast(s_bool, F32))
    value = b.binary("add", value, b.cast(s_half, F32))
    b.store(out, bi("unit_pos"), value)
    return b.kernel((32, 1, 1), name="abi_probe")


def test_param_layout_places_each_kind_at_its_alignment():
    layout = kparams.param_layout(abi_kernel())
    placed = [(s.name, s.role, s.offset, s.size, s.align) for s in layout.slots]
    assert placed == [
        ("out", "array", 0, 8, 8),
        ("small", "scalar", 8, 1, 1),
        ("tmap", "tensor_map", 64, 128, 64),  # the 128-byte CUtensorMap, 64-byte aligned
        ("flag", "scalar", 192, 1, 1),  # bool travels as one byte
        ("vec3", "scalar", 208, 16, 16),  # f32x3 is an LLVM <3 x float>: 16 bytes, align 16
        ("big", "scalar", 224, 8, 8),
        ("half", "scalar", 232, 2, 2),
        ("bytes3", "scalar", 236, 4, 4),  # u8x3: padded to 4
        ("out.buffer_len", "metadata", 240, 4, 4),  # then each buffer's u32 metadata words, by value
        ("out.len", "metadata", 244, 4, 4),
    ]
    assert layout.total_bytes == 248
    assert [s.kind_index for s in layout.slots] == [0, 0, 0, 1, 2, 3, 4, 5, 0, 1]


def test_param_layout_matches_the_ptx_entry_the_compiler_emits():
    from cubepy.compiler.compiled import compile_definition

    definition = abi_kernel()
    ptx = compile_definition(definition, "sm_90a", assemble=False).ptx
    entry = ptx[ptx.index(".entry") :]
    entry = entry[: entry.index(")")]
    declared = []
    for decl in re.findall(r"\.param\s+([^,\n]+?)\s+\w+_param_\d+(\[\d+\])?", entry):
        text, array = decl
        if array:
            align = int(re.search(r"\.align (\d+)", text).group(1))
            declared.append((int(array[1:-1]), align))
        elif ".ptr" in text or ".u64" in text or ".b64" in text or ".s64" in text or ".f64" in text:
            declared.append((8, 8))
        else:
            bits = int(re.search(r"(\d+)$", text).group(1))
            declared.append((bits // 8, bits // 8))
    layout = kparams.param_layout(definition)
    assert declared == [(s.size, s.align) for s in layout.slots]


@pytest.mark.parametrize(
    "value, ty, expected",
    [
        (True, BOOL, b"\x01"),
        (np.bool_(False), BOOL, b"\x00"),
        (1.5, F32, np.float32(1.5).tobytes()),
        (-2, I64, np.int64(-2).tobytes()),
        (0.25, F16, np.float16(0.25).tobytes()),
        ([1.0, 2.0, 3.0], line(F32, 3), np.array([1, 2, 3], np.float32).tobytes() + bytes(4)),
        (7, line(U8, 3), bytes([7, 7, 7, 0])),  # one value splat to every lane
    ],
)
def test_scalar_bytes(value, ty, expected):
    assert kparams.scalar_bytes(value, ty) == expected


def test_scalar_bytes_bf16_and_wrong_lane_count():
    from cubepy.ir import BF16, Type

    assert kparams.scalar_bytes(1.0, Type(BF16)) == np.array(1.0, ml_dtypes.bfloat16).tobytes()
    with pytest.raises(LaunchError, match="expected 4 value"):
        kparams.scalar_bytes([1, 2], line(F32, 4), "v")


def test_pack_params_writes_every_value_where_the_pointers_say():
    layout = kparams.param_layout(abi_kernel())
    descriptor = bytes(range(128))
    scalars = [np.uint8(9), True, [1.0, 2.0, 3.0], np.int64(-5), np.float16(0.5), [1, 2, 3]]
    packed = kparams.pack_params(layout, [0x7000_0000_0100], scalars, [descriptor], [77, 0xFFFF_FFFE])
    base = packed.block.ctypes.data
    assert base % 64 == 0
    assert [int(p) - base for p in packed.pointers] == [s.offset for s in layout.slots]
    assert packed.address == packed.pointers.ctypes.data
    block = packed.block.tobytes()

    def at(name):
        slot = next(s for s in layout.slots if s.name == name)
        return block[slot.offset : slot.offset + slot.size]

    assert at("out") == (0x7000_0000_0100).to_bytes(8, "little")
    assert at("tmap") == descriptor
    assert at("flag") == b"\x01"
    assert at("big") == np.int64(-5).tobytes()
    assert at("out.buffer_len") == (77).to_bytes(4, "little")
    assert at("out.len") == b"\xfe\xff\xff\xff"


def test_pack_params_refuses_missing_arguments():
    layout = kparams.param_layout(abi_kernel())
    with pytest.raises(LaunchError, match="takes 1 tensor_map parameter"):
        kparams.pack_params(layout, [0x1000], [1, True, [1, 2, 3], 1, 1, 1], [], [1, 1])
    with pytest.raises(LaunchError, match="takes 2 metadata parameter"):
        kparams.pack_params(layout, [0x1000], [1, True, [1, 2, 3], 1, 1, 1], [bytes(128)], [1])


# -- tensor maps -----------------------------------------------------------------------------------


def _tensor(shape, dtype=np.float16, offset=0):
    count = int(np.prod(shape)) + offset
    return Handle(None, np.zeros(count, dtype), dtype, shape, offset=offset)


def tiled_map():
    return TensorMapArg.tiled(_tensor((64, 128)), (16, 64), swizzle="128B", oob_fill="nan")


def im2col_map():
    return TensorMapArg.im2col(
        _tensor((2, 10, 12, 64)),
        channels_per_pixel=64,
        pixels_per_column=32,
        lower_corner=(-1, -1),
        upper_corner=(-1, -1),
    )


def test_driver_arguments_for_a_tiled_map():
    fake = FakeDriver()
    params = tiled_map().encode_params(0x7F00_0000_0000)
    call, order = tensormaps.encode_call(params)
    args = tensormaps.driver_arguments(params, fake)
    assert call == "cuTensorMapEncodeTiled" and len(args) == len(order) == 11
    named = dict(zip(order, args))
    assert named["tensorDataType"].key == CU_ENUM_VALUES["CU_TENSOR_MAP_DATA_TYPE_FLOAT16"]
    assert named["tensorRank"] == 2 and named["globalAddress"] == 0x7F00_0000_0000
    assert named["globalDim"] == [128, 64] and all(type(v) is FakeU64 for v in named["globalDim"])
    assert named["globalStrides"] == [256] and all(type(v) is FakeU64 for v in named["globalStrides"])
    assert named["boxDim"] == [64, 16] and all(type(v) is FakeU32 for v in named["boxDim"])
    assert named["elementStrides"] == [1, 1] and all(type(v) is FakeU32 for v in named["elementStrides"])
    assert named["swizzle"].key == CU_ENUM_VALUES["CU_TENSOR_MAP_SWIZZLE_128B"]
    assert named["oobFill"].key == CU_ENUM_VALUES["CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA"]


def test_driver_arguments_for_an_im2col_map():
    fake = FakeDriver()
    params = im2col_map().encode_params(0x7F00_0000_0000)
    call, order = tensormaps.encode_call(params)
    named = dict(zip(order, tensormaps.driver_arguments(params, fake)))
    assert call == "cuTensorMapEncodeIm2col" and len(order) == 14
    assert named["globalDim"] == [64, 12, 10, 2]
    assert named["pixelBoxLowerCorner"] == [-1, -1] and all(type(v) is int for v in named["pixelBoxLowerCorner"])
    assert named["channelsPerPixel"] == 64 and named["pixelsPerColumn"] == 32


def test_encode_adds_the_handle_offset_and_returns_the_descriptor():
    fake = FakeDriver()
    arg = TensorMapArg.tiled(_tensor((64, 128), offset=64), (16, 64))
    descriptor = tensormaps.encode(arg, 0x7F00_0000_0000, fake)
    assert len(descriptor) == 128
    (args,) = fake.called("cuTensorMapEncodeTiled")
    assert args[2] == 0x7F00_0000_0000 + 64 * 2


def test_a_driver_refusal_is_a_tensor_map_error_naming_call_and_arguments():
    fake = FakeDriver()
    fake.failures["cuTensorMapEncodeIm2col"] = "CUDA_ERROR_INVALID_VALUE"
    with pytest.raises(TensorMapError) as info:
        tensormaps.encode(im2col_map(), 0x7F00_0000_0000, fake)
    text = str(info.value)
    assert text.startswith("cuTensorMapEncodeIm2col failed: CUDA_ERROR_INVALID_VALUE")
    assert "pixelBoxLowerCorner = [-1, -1]" in text and "globalAddress = 0x7f0000000000" in text


def test_cu_enum_values_match_cuda_bindings():
    driver = real_driver_module()
    classes = [
        driver.CUtensorMapDataType,
        driver.CUtensorMapInterleave,
        driver.CUtensorMapSwizzle,
        driver.CUtensorMapL2promotion,
        driver.CUtensorMapFloatOOBfill,
    ]
    for name, value in CU_ENUM_VALUES.items():
        owners = [cls for cls in classes if hasattr(cls, name)]
        assert len(owners) == 1, name
        assert int(getattr(owners[0], name)) == value, name


def _reaches_the_driver(call, *args):
    """Call a real driver function; True when cuda-bindings accepted every argument's type."""
    try:
        result = call(*args)
    except (TypeError, ValueError, OverflowError) as exc:
        pytest.fail(f"{call.__name__} refused its arguments: {exc}")
    except Exception as exc:  # no libcuda: raised after every argument was converted
        return "DynamicLibNotFound" in type(exc).__name__ or "not found" in str(exc).lower()
    return isinstance(result, tuple)


@pytest.mark.parametrize("make_map", [tiled_map, im2col_map])
def test_cuda_bindings_accepts_the_encode_arguments(make_map):
    driver = real_driver_module()
    params = make_map().encode_params(0x7F00_0000_0000)
    call, _ = tensormaps.encode_call(params)
    assert _reaches_the_driver(getattr(driver, call), *tensormaps.driver_arguments(params, driver))


@pytest.mark.skipif(REASON is None, reason="with a driver, these calls would really run")
def test_cuda_bindings_accepts_the_launch_and_memory_arguments():
    driver = real_driver_module()
    packed = kparams.pack_params(
        kparams.param_layout(abi_kernel()), [0x1000], [1, True, [1, 2, 3], 1, 1, 1], [bytes(128)], [16, 16]
    )
    stream = driver.CUstream(0)
    host = np.zeros(16, np.uint8)
    assert _reaches_the_driver(
        driver.cuLaunchKernel, driver.CUfunction(0), 1, 1, 1, 32, 1, 1, 0, stream, packed.address, 0
    )
    assert _reaches_the_driver(driver.cuMemcpyHtoDAsync, 0x1000, int(host.ctypes.data), 16, stream)
    assert _reaches_the_driver(driver.cuMemcpyDtoHAsync, int(host.ctypes.data), 0x1000, 16, stream)
    assert _reaches_the_driver(driver.cuMemsetD8Async, 0x1000, 0xCD, 16, stream)
    log = bytearray(64)
    options = [driver.CUjit_option.CU_JIT_ERROR_LOG_BUFFER, driver.CUjit_option.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES]
    assert _reaches_the_driver(driver.cuModuleLoadDataEx, b"//\0", 2, options, [log, len(log)])
    assert _reaches_the_driver(driver.cuModuleGetFunction, driver.CUmodule(0), b"k")
    attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    assert _reaches_the_driver(driver.cuFuncSetAttribute, driver.CUfunction(0), attr, 100_000)


def test_descriptor_bytes_reads_a_cuda_bindings_tensor_map():
    driver = real_driver_module()
    assert tensormaps.descriptor_bytes(driver.CUtensorMap()) == bytes(128)


def test_simple_namespace_is_not_a_driver():
    # Guard for the fakes above: enum lookups go through getattr on the module, never a fixed import.
    with pytest.raises(AttributeError):
        tensormaps.driver_arguments(tiled_map().encode_params(0), SimpleNamespace())
