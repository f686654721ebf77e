"""Handles are only made over memory a kernel may write (issue 28): the refusals and what keeps working.

A hand-built ``cp.Handle`` over a reversed or strided numpy view, a read-only or bytes-backed array, or
memory nothing keeps alive is refused when the handle is made, with the array property named; so the
launch never starts and the user's memory is untouched.  Views made by ``handle[a:b]`` and the copies
``client.create`` makes keep working.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import cubepy as cp
from cubepy import ABSOLUTE_POS, Array, cube, f32
from cubepy.errors import LaunchError
from cubepy.runtime.handle import Handle

RUNTIMES = [name for name in ("interp", "cpu") if name in cp.runtimes()]


@cube(launch=True)
def fill(out: Array[f32], value: f32):
    if ABSOLUTE_POS < out.len():
        out[ABSOLUTE_POS] = value


def _launch_fill(client, handle: Handle, value: float = 7.0) -> None:
    fill.launch(client, cp.CubeCount(1), cp.CubeDim(32), cp.ArrayArg(handle), value)


def _read_only(n: int) -> np.ndarray:
    array = np.zeros(n, np.float32)
    array.setflags(write=False)
    return array


def _from_address(keep: list) -> np.ndarray:
    """An array over ctypes memory reached by address only: nothing in the array keeps it alive."""
    owner = (ctypes.c_float * 16)()
    keep.append(owner)  # the test keeps it alive, so refusing it is about what the array holds, not luck
    alias = (ctypes.c_float * 16).from_address(ctypes.addressof(owner))
    return np.ctypeslib.as_array(alias)


# (name, a function making the user's array from a base of 16 zeros, words the error must contain)
REFUSED = [
    ("reversed view", lambda base, keep: base[::-1], "negative strides"),
    ("strided view", lambda base, keep: base[::2], "not C-contiguous"),
    ("column of a 2-D array", lambda base, keep: base.reshape(4, 4)[:, 1], "not C-contiguous"),
    ("read-only array", lambda base, keep: _read_only(16), "not writeable"),
    ("bytes-backed array", lambda base, keep: np.frombuffer(bytes(64), np.float32), "not writeable"),
    ("memory nothing keeps alive", lambda base, keep: _from_address(keep), "is not kept alive"),
]


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize(("name", "make", "words"), REFUSED, ids=[case[0] for case in REFUSED])
def test_a_handle_over_memory_a_kernel_may_not_write_is_refused(runtime, name, make, words):
    client = cp.client(runtime)
    keep: list = []
    base = np.zeros(16, np.float32)
    array = make(base, keep)
    before = np.array(array, copy=True)
    with pytest.raises(LaunchError, match=words) as caught:
        _launch_fill(client, Handle(client, array, array.dtype, array.shape))
    assert "numpy storage" in str(caught.value)
    assert "client.create" in str(caught.value)  # says what to do instead
    np.testing.assert_array_equal(np.asarray(array), before)  # a refused launch writes nothing
    assert not base.any()


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_storage_of_another_dtype_is_refused(runtime):
    client = cp.client(runtime)
    raw = np.zeros(16, np.uint8)
    with pytest.raises(LaunchError, match=r"holds uint8, not float32"):
        Handle(client, raw, np.float32, (16,))


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize(
    ("shape", "strides", "offset", "words"),
    [
        ((16,), (1,), 1, "reaches element 16 of a storage of 16"),
        ((4, 5), (5, 1), 0, "reaches element 19"),
        ((4,), (-1,), 3, "negative strides"),
        ((4,), (1,), -1, "negative offset"),
        ((4, 4), (4,), 0, "1 strides for a rank-2 shape"),
    ],
)
def test_a_handle_reaching_outside_its_storage_is_refused(runtime, shape, strides, offset, words):
    client = cp.client(runtime)
    with pytest.raises(LaunchError, match=words):
        Handle(client, np.zeros(16, np.float32), np.float32, shape, strides, offset)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_storage_that_is_not_a_numpy_array_is_refused(runtime):
    client = cp.client(runtime)
    with pytest.raises(LaunchError, match=r"must be a numpy array, got list"):
        Handle(client, [0.0] * 16, np.float32, (16,))


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_memory_a_kernel_may_write_is_written_in_place(runtime):
    client = cp.client(runtime)
    owned = np.zeros((4, 4), np.float32)  # C-contiguous 2-D: flattened to a view, not copied
    _launch_fill(client, Handle(client, owned, owned.dtype, (16,)), 3.0)
    assert (owned == 3.0).all()
    backing = bytearray(64)  # writeable, kept alive by the array
    over_bytes = np.frombuffer(backing, np.float32)
    _launch_fill(client, Handle(client, over_bytes, over_bytes.dtype, over_bytes.shape), 4.0)
    assert (np.frombuffer(bytes(backing), np.float32) == 4.0).all()
    row = np.zeros((4, 16), np.float32)[2]  # a contiguous row of a bigger array: a view kept alive by its base
    _launch_fill(client, Handle(client, row, row.dtype, row.shape), 5.0)
    assert (row == 5.0).all()


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_views_and_copies_keep_working(runtime):
    client = cp.client(runtime)
    source = np.arange(16, dtype=np.float32)
    reversed_copy = client.create(source[::-1])  # create copies any array, whatever its layout
    np.testing.assert_array_equal(client.read(reversed_copy), source[::-1])
    strided_copy = client.create(np.frombuffer(source.tobytes(), np.float32)[::2])
    np.testing.assert_array_equal(client.read(strided_copy), source[::2])
    whole = client.create(source)
    _launch_fill(client, whole[4:8], -1.0)  # a handle view writes its rows only
    expected = source.copy()
    expected[4:8] = -1.0
    np.testing.assert_array_equal(client.read(whole), expected)


def test_the_cuda_runtime_refuses_read_only_external_memory():
    """The same rule on cuda, through the fake driver: a read-only ``__cuda_array_interface__`` is refused."""
    from cubepy.runtime.cuda.backend import CudaBackend
    from cubepy.runtime.cuda.client import CudaClient
    from cubepy.runtime.cuda.device import CudaDevice
    from tests.runtime.cuda.fake_driver import FakeDriver, fake_compiler

    device = CudaDevice(0, driver=FakeDriver())
    client = CudaClient(device, CudaBackend(device, fake_compiler({})))
    owner = client.create(np.arange(8, dtype=np.float32))

    class Exporter:
        def __init__(self, read_only: bool) -> None:
            self.__cuda_array_interface__ = {
                "shape": (8,),
                "typestr": "<f4",
                "data": (owner.storage.ptr, read_only),
                "version": 3,
            }

    with pytest.raises(LaunchError, match="read-only"):
        client.from_external(Exporter(True))
    assert client.from_external(Exporter(False)).shape == (8,)
