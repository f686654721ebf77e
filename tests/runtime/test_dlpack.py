"""DLPack both ways on the host runtimes: borrowed memory that kernels write, handles other libraries read.

Oracles: numpy's and PyTorch's own views of the same memory (a write on one side must show on the other, so
no copy was made), ml_dtypes for the bits of bf16 and float8 values, and the refusals' named properties.
"""

from __future__ import annotations

import ctypes
import gc
import weakref

import ml_dtypes
import numpy as np
import pytest

import cubepy as cp
from cubepy.runtime import dlpack

RUNTIMES = ["interp", "cpu"]


@cp.cube(launch=True)
def doubled(x: cp.Array[cp.f32]):
    i = cp.ABSOLUTE_POS
    if i < x.len():
        x[i] = x[i] * cp.f32(2.0)


@cp.cube(launch=True)
def twice(x: cp.Array[cp.f32], out: cp.Array[cp.f32]):
    i = cp.ABSOLUTE_POS
    if i < x.len():
        out[i] = x[i] * cp.f32(2.0)


@cp.cube(launch=True)
def copied(x: cp.Array[cp.bf16], out: cp.Array[cp.bf16]):
    i = cp.ABSOLUTE_POS
    if i < x.len():
        out[i] = x[i]


def _double(client, handle) -> None:
    doubled.launch(client, cp.CubeCount(1), cp.CubeDim(32), cp.ArrayArg(handle))


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_kernel_writes_a_borrowed_numpy_array(runtime):
    client = cp.client(runtime)
    data = np.arange(24, dtype=np.float32).reshape(4, 6)
    handle = cp.from_dlpack(data, client)
    assert handle.shape == (4, 6) and handle.dtype == np.float32
    _double(client, handle)
    np.testing.assert_array_equal(data, np.arange(24, dtype=np.float32).reshape(4, 6) * 2)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_handles_export_their_memory_without_a_copy(runtime):
    client = cp.client(runtime)
    handle = client.create(np.arange(8, dtype=np.float32))
    view = np.from_dlpack(handle)
    assert view.__dlpack_device__() == (1, 0) and handle.__dlpack_device__() == (1, 0)
    view[3] = 100.0
    assert client.read(handle)[3] == 100.0
    _double(client, handle)
    assert view[3] == 200.0


def test_create_copies_a_dlpack_exporter():
    client = cp.client("interp")

    class Exporter:  # only the protocol: no __array__, so np.asarray alone could not read it
        def __init__(self, array):
            self.array = array

        def __dlpack__(self, **kwargs):
            return self.array.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return self.array.__dlpack_device__()

    source = np.arange(5, dtype=np.int32)
    handle = client.create(Exporter(source))
    source[0] = 99
    np.testing.assert_array_equal(client.read(handle), np.arange(5, dtype=np.int32))


def test_the_borrowed_memory_lives_as_long_as_the_handle():
    client = cp.client("interp")
    data = np.arange(32, dtype=np.float32)
    alive = weakref.ref(data)
    handle = cp.from_dlpack(data, client)
    del data
    gc.collect()
    assert alive() is not None  # the handle keeps the exporter alive
    _double(client, handle)
    np.testing.assert_array_equal(client.read(handle), np.arange(32, dtype=np.float32) * 2)
    del handle
    gc.collect()
    assert alive() is None  # and lets it go: the capsule's deleter ran


def test_read_only_memory_is_refused_for_borrowing_and_copied_by_create():
    client = cp.client("interp")
    data = np.arange(4, dtype=np.float32)
    data.flags.writeable = False
    with pytest.raises(cp.LaunchError, match="read-only"):
        cp.from_dlpack(data, client)
    np.testing.assert_array_equal(client.read(client.create(data)), data)


def test_non_contiguous_memory_is_refused_naming_its_strides():
    data = np.zeros((4, 6), np.float32)[:, ::2]
    with pytest.raises(cp.LaunchError, match=r"strides \(6, 2\).*not C-contiguous"):
        cp.from_dlpack(data, cp.client("interp"))


def test_an_element_type_cubepy_lacks_is_refused_naming_it():
    with pytest.raises(cp.LaunchError, match="DLPack dtype code 5 with 64 bits has no cubepy element type"):
        cp.from_dlpack(np.zeros(3, np.complex64), cp.client("interp"))


class _OnAnotherDevice:
    """A numpy capsule relabelled as CUDA device 1 memory: what a GPU tensor would hand a host runtime."""

    def __init__(self) -> None:
        self.array = np.zeros(4, np.float32)

    def __dlpack__(self, **kwargs):
        capsule = self.array.__dlpack__(**kwargs)
        get = ctypes.pythonapi.PyCapsule_GetPointer
        get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
        versioned = kwargs.get("max_version") is not None
        if versioned:
            managed = dlpack._DLManagedTensorVersioned.from_address(get(capsule, b"dltensor_versioned"))
        else:
            managed = dlpack._DLManagedTensor.from_address(get(capsule, b"dltensor"))
        managed.dl_tensor.device.device_type, managed.dl_tensor.device.device_id = 2, 1
        return capsule

    def __dlpack_device__(self):
        return (2, 1)


def test_memory_on_another_device_is_refused_naming_the_device():
    with pytest.raises(cp.LaunchError, match="on cuda:1; the interp runtime addresses host memory only"):
        cp.from_dlpack(_OnAnotherDevice(), cp.client("interp"))


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_bf16_round_trips_through_a_kernel_bit_for_bit(runtime):
    client = cp.client(runtime)
    values = np.array([1.5, -2.25, 1e-40, 3.0e38, -0.0, np.inf], dtype=ml_dtypes.bfloat16)  # a subnormal too
    source = cp.from_dlpack(values.view(np.uint16).copy().view(ml_dtypes.bfloat16), client)
    out = client.zeros(values.shape, ml_dtypes.bfloat16)
    copied.launch(client, cp.CubeCount(1), cp.CubeDim(32), cp.ArrayArg(source), cp.ArrayArg(out))
    exported = np.from_dlpack(_Relabel(out))  # a consumer that reads bf16 as its 16 bits
    np.testing.assert_array_equal(exported, values.view(np.uint16))


class _Relabel:
    """Reads a bf16 export as uint16 (numpy has no DLPack bf16) by relabelling the capsule back: checks the code."""

    def __init__(self, handle) -> None:
        self.handle = handle

    def __dlpack__(self, **kwargs):
        capsule = self.handle.__dlpack__(**kwargs)
        get = ctypes.pythonapi.PyCapsule_GetPointer
        get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
        name = b"dltensor_versioned" if kwargs.get("max_version") is not None else b"dltensor"
        struct = dlpack._DLManagedTensorVersioned if name == b"dltensor_versioned" else dlpack._DLManagedTensor
        tensor = struct.from_address(get(capsule, name)).dl_tensor
        assert (tensor.dtype.code, tensor.dtype.bits) == (4, 16)  # DLPack's kDLBfloat
        tensor.dtype.code = 1
        return capsule

    def __dlpack_device__(self):
        return self.handle.__dlpack_device__()


# -- JAX (skipped without it) ---------------------------------------------------------------------


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_kernel_reads_a_jax_array_and_jax_reads_its_output_without_copies(runtime):
    jax = pytest.importorskip("jax")
    client = cp.client(runtime)
    x = jax.numpy.arange(24, dtype=jax.numpy.float32)
    borrowed = cp.from_dlpack(x, client)
    assert np.from_dlpack(borrowed).ctypes.data == x.unsafe_buffer_pointer()  # the kernel reads JAX's buffer
    out = client.zeros((24,), np.float32)
    twice.launch(client, cp.CubeCount(1), cp.CubeDim(32), cp.ArrayArg(borrowed), cp.ArrayArg(out))
    result = jax.dlpack.from_dlpack(out)
    assert result.unsafe_buffer_pointer() == np.from_dlpack(out).ctypes.data  # JAX reads the handle's memory
    np.testing.assert_array_equal(np.asarray(result), np.arange(24, dtype=np.float32) * 2)


# -- PyTorch (skipped without it) ------------------------------------------------------------------


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_kernel_writes_a_torch_tensor_and_torch_reads_a_handle(runtime):
    torch = pytest.importorskip("torch")
    client = cp.client(runtime)
    tensor = torch.arange(16, dtype=torch.float32)
    handle = cp.from_dlpack(tensor, client)
    _double(client, handle)
    assert torch.equal(tensor, torch.arange(16, dtype=torch.float32) * 2)
    back = torch.from_dlpack(handle)
    back[0] = -1.0
    assert client.read(handle)[0] == -1.0


@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn", "float8_e5m2"])
def test_torch_low_precision_types_round_trip_without_a_copy(dtype):
    torch = pytest.importorskip("torch")
    client = cp.client("interp")
    tensor = torch.tensor([1.5, -2.0, 0.25, 448.0 if dtype != "float8_e5m2" else 57344.0]).to(getattr(torch, dtype))
    handle = cp.from_dlpack(tensor, client)
    assert handle.dtype == np.dtype(getattr(ml_dtypes, dtype))
    np.testing.assert_array_equal(client.read(handle).view(np.uint8), tensor.view(torch.uint8).numpy())
    back = torch.from_dlpack(handle)
    assert back.dtype == tensor.dtype and back.data_ptr() == tensor.data_ptr()


def test_a_non_contiguous_torch_tensor_is_refused():
    torch = pytest.importorskip("torch")
    with pytest.raises(cp.LaunchError, match="not C-contiguous.*contiguous"):
        cp.from_dlpack(torch.zeros(4, 4).t(), cp.client("interp"))


# -- the exporter of memory numpy does not own (what a cuda handle's __dlpack__ hands out) --------------------------
class _Owner:
    """Stands for a device allocation's keeper: the test watches when the exported tensor lets it go."""

    def __init__(self, array):
        self.array = array


class _Exporter:
    def __init__(self, make):
        self.make = make

    def __dlpack__(self, **options):
        return self.make(options.get("max_version"))

    def __dlpack_device__(self):
        return (1, 0)


@pytest.mark.parametrize("max_version", [None, (1, 1)])
def test_exported_memory_is_read_in_place_and_released_after_its_last_consumer(max_version):
    source = np.arange(24, dtype=np.float32).reshape(4, 6)[:, ::2]  # strided: (4, 3) with strides (6, 2)
    owner = _Owner(source)
    alive = weakref.ref(owner)
    capsule = dlpack.export_memory(source.ctypes.data, source.dtype, (4, 3), (6, 2), (1, 0), owner, max_version)
    del owner
    view = dlpack.from_dlpack(_Exporter(lambda _, made=capsule: made))
    assert (view.shape, view.strides, view.device_type, view.ptr) == ((4, 3), (6, 2), 1, source.ctypes.data)
    assert alive() is not None, "the owner must live while a consumer holds the tensor"
    del view, capsule
    gc.collect()
    assert alive() is None, "the deleter must release the owner once the consumer is done"


def test_an_unconsumed_capsule_releases_its_owner():
    owner = _Owner(np.zeros(3, np.float32))
    alive = weakref.ref(owner)
    capsule = dlpack.export_memory(owner.array.ctypes.data, np.dtype(np.float32), (3,), (1,), (2, 0), owner)
    del owner
    assert alive() is not None
    del capsule
    gc.collect()
    assert alive() is None


def test_numpy_consumes_exported_memory_bf16_relabeled():
    source = np.array([1.5, -2.0, 3.25], dtype=ml_dtypes.bfloat16)
    owner = _Owner(source)
    exporter = _Exporter(
        lambda mv: dlpack.export_memory(source.ctypes.data, source.dtype, (3,), (1,), (1, 0), owner, mv)
    )
    view = dlpack.from_dlpack(exporter)
    assert view.dtype == np.dtype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(dlpack.host_array(view)[:3], source)
    plain = np.arange(5, dtype=np.int16)
    keeper = _Owner(plain)
    got = np.from_dlpack(
        _Exporter(lambda mv: dlpack.export_memory(plain.ctypes.data, plain.dtype, (5,), (1,), (1, 0), keeper, mv))
    )
    np.testing.assert_array_equal(got, plain)
