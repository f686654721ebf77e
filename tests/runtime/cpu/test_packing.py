"""``KernelPacker`` writes ``ParamPacker``'s bytes and raises its errors; its blocks are reused between launches."""

from __future__ import annotations

import numpy as np
import pytest

import cubepy as cp
from cubepy import Array, Tensor, cube, f32, i32, u32
from cubepy.compiler import abi
from cubepy.errors import LaunchError
from cubepy.runtime.bindings import BufferBinding
from cubepy.runtime.cpu.packing import KernelPacker


@cube(launch=True)
def mixed(a: Tensor[f32], flag: cp.boolean, out: Array[f32], scale: f32, shift: i32, count: u32):
    if flag and cp.ABSOLUTE_POS < out.len():
        out[cp.ABSOLUTE_POS] = a[0, 0] * scale + f32(shift) + f32(count) + f32(a.stride(0)) + f32(a.shape(1))


def _layout_and_bindings(client):
    a, out = client.zeros((3, 5), np.float32), client.zeros(7, np.float32)
    definition = mixed.compile(
        cp.CubeDim(8), cp.TensorArg(a), True, cp.ArrayArg(out), 1.5, -3, 9, target="sm_90a"
    ).definition
    buffers = [BufferBinding(a, 1, (3, 5), (5, 1)), BufferBinding(out, 1, (7,), (1,))]
    return abi.param_layout(definition), buffers


def _slow_bytes(layout, addresses, buffers, scalars):
    from cubepy.runtime.params import ParamPacker

    packer = ParamPacker(layout)
    return packer.pack(addresses, scalars, [], packer.metadata(buffers, "mixed")).block.tobytes()


def test_the_block_holds_param_packers_bytes_and_is_reused():
    layout, buffers = _layout_and_bindings(cp.client("interp"))
    packer = KernelPacker(layout, "mixed")
    addresses = [0x7F00_0000_1000, 0x7F00_0000_2040]
    for scalars in ([True, np.float32(1.5), np.int32(-3), np.uint32(9)], [False, 2.25, 7, 2**32 - 1]):
        block, address = packer.pack(lambda: addresses, buffers, scalars, [])
        assert address % 64 == 0 and address == block.ctypes.data
        assert block.tobytes() == _slow_bytes(layout, addresses, buffers, scalars)
        packer.release(block, address)
    again, address_again = packer.pack(lambda: addresses, buffers, [True, 1.0, 0, 0], [])
    assert address_again == address  # the released block serves the next launch


def test_a_memo_keeps_the_buffer_words_and_each_launch_packs_its_own_scalars():
    layout, buffers = _layout_and_bindings(cp.client("interp"))
    packer = KernelPacker(layout, "mixed")
    addresses = [0x7F00_0000_1000, 0x7F00_0000_2040]
    asked = []

    def addresses_once():
        asked.append(1)
        return addresses

    memo: dict[object, object] = {}
    for scalars in ([True, np.float32(1.5), np.int32(-3), np.uint32(9)], [False, 2.25, 7, 2**32 - 1]):
        block, address = packer.pack(addresses_once, buffers, scalars, [], memo)
        assert block.tobytes() == _slow_bytes(layout, addresses, buffers, scalars)
        packer.release(block, address)
    assert len(asked) == 1  # the second launch took the addresses and metadata words from the memo


def test_metadata_words_are_the_bindings_by_hand():
    layout, buffers = _layout_and_bindings(cp.client("interp"))
    block, _ = KernelPacker(layout, "mixed").pack(lambda: [64, 128], buffers, [True, 1.0, 0, 0], [])
    values = {}
    for slot in layout.slots:
        if slot.word is not None:
            values[(slot.word.buffer, slot.word.name)] = int(block[slot.offset : slot.offset + 4].view(np.uint32)[0])
    assert values[(0, "len")] == 15 and values[(0, "shape0")] == 3 and values[(0, "shape1")] == 5
    assert values[(0, "stride0")] == 5 and values[(0, "stride1")] == 1 and values[(1, "len")] == 7


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("address", "is not a 64-bit device address"),
        ("stride", "does not fit the u32 metadata"),
        ("rank", "do not have the rank"),
        ("count", "takes 2 buffer"),
    ],
)
def test_a_value_that_does_not_fit_raises_param_packers_error(change, message):
    layout, buffers = _layout_and_bindings(cp.client("interp"))
    addresses = [64, 128]
    if change == "address":
        addresses = [-64, 128]
    elif change == "stride":
        buffers[0] = BufferBinding(buffers[0].handle, 1, (3, 5), (2**32, 1))
    elif change == "rank":
        buffers[0] = BufferBinding(buffers[0].handle, 1, (15,), (1,))
    else:
        buffers = buffers[:1]
        addresses = addresses[:1]
    with pytest.raises(LaunchError, match=message):
        KernelPacker(layout, "mixed").pack(lambda: addresses, buffers, [True, 1.0, 0, 0], [])


def test_launches_on_cpu_with_scalars_match_numpy():
    cpu = cp.client("cpu")
    a = np.arange(15, dtype=np.float32).reshape(3, 5)
    ha, out = cpu.create(a), cpu.zeros(7, np.float32)
    for flag, scale, shift, count in ((True, 2.0, -3, 4), (False, 9.0, 1, 1), (True, 0.5, 10, 0)):
        before = cpu.read(out).copy()
        mixed.launch(cpu, cp.CubeCount(1), cp.CubeDim(8), cp.TensorArg(ha), flag, cp.ArrayArg(out), scale, shift, count)
        # a[0, 0] is 0: each element is shift + count + stride(0) (5) + shape(1) (5); a launch with flag off writes nothing
        expected = np.full(7, shift + count + 10, np.float32) if flag else before
        np.testing.assert_array_equal(cpu.read(out), expected)
