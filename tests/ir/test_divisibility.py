"""Integer scalars specialized on divisibility by 16, and what the range analysis makes of it: a ``min`` the
trailing zeros and a branch's order pin to one value becomes that value (``cubepy.ir.ranges``)."""

from __future__ import annotations

import re

import hypothesis
import hypothesis.strategies as st
import numpy as np
import pytest

import cubepy as cp
from cubepy import UNIT_POS, Array, f32, i32, u32
from cubepy.ir import ops
from cubepy.ir.ops import branch
from cubepy.ir.printer import format_kernel
from cubepy.ir.scope import walk


@cp.cube(launch=True, launch_unchecked=True)
def chunk_lengths(out: Array[u32], cols: u32):
    """out[u] = the items of the 8-item chunk at column 8u inside a row of ``cols``: 8, the tail, or 0."""
    col = UNIT_POS * 8
    valid = u32(0)
    if col < cols:
        valid = cp.min(cols - col, u32(8))
    out[UNIT_POS] = valid


def _mins(definition) -> int:
    return _mins_in(definition.body)


def _mins_in(scope) -> int:
    return sum(isinstance(inst.operation, ops.Min) for inst in walk(scope))


def _compile(cols: int, **options):
    client = cp.client("interp")
    out = cp.ArrayArg(client.zeros((8,), np.uint32))
    return chunk_lengths.compile(cp.CubeDim(8), out, cp.ScalarArg(cols, u32), target="sm_80", **options)


@pytest.mark.parametrize(("value", "elem", "multiple"), [(512, u32, 16), (520, u32, 1), (0, u32, 16), (-32, i32, 16)])
def test_an_integer_scalar_is_specialized_on_divisibility_by_16(value, elem, multiple):
    @cp.cube(launch=True)
    def store(out: Array[f32], n: elem):  # type: ignore[valid-type]
        out[0] = f32(n)

    client = cp.client("interp")
    comp = store.compilation_args((cp.ArrayArg(client.zeros((1,), np.float32)), cp.ScalarArg(value, elem)))
    assert comp[1].multiple_of == multiple


def test_a_float_scalar_has_no_divisibility():
    @cp.cube(launch=True)
    def store(out: Array[f32], x: f32):
        out[0] = x

    client = cp.client("interp")
    comp = store.compilation_args((cp.ArrayArg(client.zeros((1,), np.float32)), 32.0))
    assert comp[1].multiple_of == 1


@pytest.mark.parametrize("unchecked", [False, True])
def test_min_of_a_multiple_of_8_below_a_multiple_of_16_is_folded(unchecked):
    """``cols`` a multiple of 16 and ``col`` of 8 with ``col < cols``: ``cols - col >= 8``, so the min is 8."""
    divisible = _compile(512, unchecked=unchecked)
    assert divisible.definition.params[1].multiple_of == 16
    assert _mins(divisible.definition) == 0
    ragged = _compile(20, unchecked=unchecked)  # 20 - 16 = 4: the min is live
    assert ragged.definition.params[1].multiple_of == 1
    assert _mins(ragged.definition) == 1


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
def test_divisible_and_ragged_launches_each_get_their_kernel(runtime):
    """One launch per pattern, each against the lengths worked by hand (a cached divisible kernel must not
    serve the ragged launch)."""
    client = cp.client(runtime)
    out = client.zeros((8,), np.uint32)
    for cols, expected in ((32, [8, 8, 8, 8, 0, 0, 0, 0]), (20, [8, 8, 4, 0, 0, 0, 0, 0]), (48, [8] * 6 + [0, 0])):
        chunk_lengths.launch(client, cp.CubeCount(1), cp.CubeDim(8), cp.ArrayArg(out), cp.ScalarArg(cols, u32))
        np.testing.assert_array_equal(client.read(out), np.array(expected, np.uint32))


def test_the_printed_ir_says_which_scalars_are_multiples():
    assert "(scalar, multiple of 16)" in format_kernel(_compile(512).definition)
    assert "multiple of" not in format_kernel(_compile(20).definition)


@cp.cube(launch=True)
def shifted(out: Array[u32], cols: u32):
    """out[u] = cols + min(u << -1, 5): a shift amount is read as unsigned, so -1 shifts every bit out (0)."""
    col = i32(UNIT_POS) << i32(-1)
    out[UNIT_POS] = u32(cp.min(col, i32(5))) + cols


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
def test_a_shift_by_a_negative_amount_is_understood_as_the_runtimes_do(runtime):
    """The trailing zeros of a shift by a negative literal are the width's (the result is 0), not fewer than
    none: the analysis must neither fail nor change the result (32 + 0, worked by hand)."""
    client = cp.client(runtime)
    out = client.zeros((4,), np.uint32)
    shifted.launch(client, cp.CubeCount(1), cp.CubeDim(4), cp.ArrayArg(out), cp.ScalarArg(32, u32))
    np.testing.assert_array_equal(client.read(out), np.full(4, 32, np.uint32))


@pytest.mark.parametrize(("items", "line", "multiple"), [(512, 1, 16), (20, 1, 1), (64, 4, 16), (32, 4, 1)])
def test_a_buffer_is_specialized_on_its_len_being_a_multiple_of_16(items, line, multiple):
    """``len()`` counts lines: 64 items in lines of 4 are 16 lines, 32 items are 8."""

    @cp.cube(launch=True)
    def touch(a: Array[cp.Line[f32]]):
        a[0] = a[0]

    client = cp.client("interp")
    comp = touch.compilation_args((cp.ArrayArg(client.zeros((items,), np.float32), line_size=line),))
    assert comp[0].len_multiple_of == multiple
    text = format_kernel(touch.compile(cp.CubeDim(1), *comp, target="sm_80").definition)
    assert ("(array, len multiple of 16" in text) == (multiple == 16)


@cp.cube(launch=True, launch_unchecked=True)
def chunk_copy(src: Array[cp.f16], out: Array[cp.f16]):
    """out[8u : 8u + 8] = src[8u : 8u + 8] through one 16-byte cp.async per unit, zero past src's end."""
    stage = cp.SharedMemory.aligned(cp.f16, 64, 16)
    start = UNIT_POS * 8
    cp.memcpy_async(src.slice(start, start + 8), stage[start : start + 8])
    cp.async_commit_group()
    cp.async_wait_group(0)
    for i in range(8):
        out[start + i] = stage[start + i]


def _chunk_copy(items: int):
    client = cp.client("interp")
    args = (cp.ArrayArg(client.zeros((items,), np.float16)), cp.ArrayArg(client.zeros((64,), np.float16)))
    return chunk_copy.compile(cp.CubeDim(8), *args, target="sm_80")


def test_a_checked_chunk_copy_of_a_buffer_of_16_multiple_len_is_all_or_nothing():
    """Against a length that is a multiple of 16 items every 8-item chunk is wholly inside or wholly outside:
    the copy's cut at the buffer's end is no ``min`` (a predicate); against 60 items the last chunk is cut
    to 4, so one stays."""
    assert _mins(_chunk_copy(48).definition) == 0
    assert _mins(_chunk_copy(60).definition) >= 1


def _copies(definition) -> list:
    return [inst.operation for inst in walk(definition.body) if isinstance(inst.operation, ops.AsyncCopy)]


@pytest.mark.ptxas
def test_an_all_or_nothing_chunk_is_marked_and_copies_under_a_predicate():
    """The bounds pass marks the copy whose byte count is 0 or 16 (``all_or_nothing``) and the GPU copy is the
    ``ignore-src`` form; the chunk that may be cut to 4 items keeps its byte count (``src-size``)."""
    whole, ragged = _chunk_copy(48), _chunk_copy(60)
    assert [op.all_or_nothing for op in _copies(whole.definition)] == [True]
    assert [op.all_or_nothing for op in _copies(ragged.definition)] == [False]
    assert re.search(r"cp\.async\.cg\.shared\.global \[%r\d+\], \[%rd\d+\], 16, %p\d+;", whole.ptx)
    assert re.search(r"cp\.async\.cg\.shared\.global [^;]*, 16, %r\d+;", ragged.ptx)


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
@pytest.mark.parametrize("items", [48, 60, 64])
def test_chunk_copies_read_what_lies_inside_the_buffer_and_zero_past_it(runtime, items):
    client = cp.client(runtime)
    src = np.arange(1, items + 1).astype(np.float16)
    out = client.zeros((64,), np.float16)
    chunk_copy.launch(client, cp.CubeCount(1), cp.CubeDim(8), cp.ArrayArg(client.create(src)), cp.ArrayArg(out))
    expected = np.zeros(64, np.float16)
    expected[:items] = src
    np.testing.assert_array_equal(client.read(out), expected)


@cp.cube(launch=True)
def assigned_later(out: Array[u32], rounds: u32):
    """out[i] = min(x, 4) where x is 0 in round 0 and 9 after: the read comes before the loop's assignment."""
    x = u32(0)
    for i in range(rounds):
        out[i] = cp.min(x, u32(4))
        x = u32(9)
    out[rounds] = cp.min(x, u32(16))  # 0 or 9 here: below 16, so the min is x


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
def test_a_mutable_read_before_a_later_assignment_is_not_narrowed_to_the_earlier_ones(runtime):
    """In round 0 x is 0, after it 9 (worked by hand: 0, 4, 4, then x = 9 below 16)."""
    client = cp.client(runtime)
    out = client.zeros((4,), np.uint32)
    assigned_later.launch(client, cp.CubeCount(1), cp.CubeDim(1), cp.ArrayArg(out), cp.ScalarArg(3, u32))
    np.testing.assert_array_equal(client.read(out), np.array([0, 4, 4, 9], np.uint32))


def test_a_mutable_assigned_only_literals_below_a_bound_needs_no_min():
    """After the loop x is 0 or 9, both below 16: that min is x; the one inside the loop stays."""
    client = cp.client("interp")
    args = (cp.ArrayArg(client.zeros((4,), np.uint32)), cp.ScalarArg(3, u32))
    body = assigned_later.compile(cp.CubeDim(1), *args, target="sm_80").definition.body
    defs = {inst.out: inst.operation for inst in walk(body) if inst.out is not None}
    last_store = [inst.operation for inst in body.instructions if isinstance(inst.operation, ops.IndexAssign)][-1]
    assert isinstance(defs[last_store.value], ops.Assign)  # was min(x, 16)
    loops = [inst.operation for inst in body.instructions if isinstance(inst.operation, branch.RangeLoop)]
    assert loops and all(_mins_in(loop.body) == 1 for loop in loops)  # min(x, 4) with x 0 or 9 stays


@cp.cube(launch=True)
def cut_chunks(src: Array[u32], out: Array[u32], n: u32):
    """out[u] = min(valid, n - start past 0): valid is 8 for an even src[u], else 0; start is src[u] down to 8."""
    valid = u32(0)
    if src[UNIT_POS] % 2 == 0:
        valid = u32(8)
    start = src[UNIT_POS] & u32(0xFFFFFFF8)
    left = cp.select(n > start, n - start, u32(0))
    out[UNIT_POS] = cp.min(valid, left)


@hypothesis.settings(max_examples=30, deadline=None)
@hypothesis.given(
    n=st.integers(0, 2**32 - 1) | st.integers(0, 2**28 - 1).map(lambda k: 16 * k),
    values=st.lists(st.integers(0, 2**32 - 1), min_size=8, max_size=8),
)
def test_a_min_of_all_or_nothing_against_a_multiple_is_the_min(n, values):
    """Rewritten to a select when ``n`` is a multiple of 16, kept otherwise; numpy's min either way."""
    client = cp.client("interp")
    src = np.asarray(values, np.uint32)
    out = client.zeros((8,), np.uint32)
    args = (cp.ArrayArg(client.create(src)), cp.ArrayArg(out), cp.ScalarArg(n, u32))
    cut_chunks.launch(client, cp.CubeCount(1), cp.CubeDim(8), *args)
    start = src.astype(np.int64) & 0xFFFFFFF8
    expected = np.minimum(np.where(src % 2 == 0, 8, 0), np.maximum(n - start, 0))
    np.testing.assert_array_equal(client.read(out), expected.astype(np.uint32))
    compiled = cut_chunks.compile(cp.CubeDim(8), *args, target="sm_80")
    assert (_mins(compiled.definition) == 0) == (n % 16 == 0)


@pytest.mark.parametrize(
    ("shape", "strides", "shapes", "stride_multiples"),
    [((32, 48), None, (16, 16), (16, 1)), ((5, 48), None, (1, 16), (16, 1)), ((4, 8), (16, 1), (1, 1), (16, 1))],
)
def test_a_tensor_is_specialized_on_each_shape_and_stride_being_a_multiple_of_16(
    shape, strides, shapes, stride_multiples
):
    @cp.cube(launch=True)
    def touch(t: cp.Tensor[f32]):
        t[0] = t[0]

    client = cp.client("interp")
    handle = client.zeros((shape[0] * (strides or shape[1:])[0],), np.float32)
    arg = (
        cp.TensorArg(client.zeros(shape, np.float32))
        if strides is None
        else cp.TensorArg.from_raw_parts(handle, strides, shape)
    )
    comp = touch.compilation_args((arg,))
    assert (comp[0].shape_multiple_of, comp[0].stride_multiple_of) == (shapes, stride_multiples)
    param = touch.compile(cp.CubeDim(1), *comp, target="sm_80").definition.params[0]
    assert (param.shape_multiple_of, param.stride_multiple_of) == (shapes, stride_multiples)


@cp.cube(launch=True, launch_unchecked=True)
def row_chunks(t: cp.Tensor[u32], out: Array[u32]):
    """out[u] = the items of the 8-item chunk at column 8u of t's rows: min(cols - col, 8) under col < cols."""
    cols = t.shape(1)
    col = UNIT_POS * 8
    valid = u32(0)
    if col < cols:
        valid = cp.min(cols - col, u32(8))
    out[UNIT_POS] = valid


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
@pytest.mark.parametrize(("cols", "expected"), [(32, [8, 8, 8, 8, 0, 0]), (20, [8, 8, 4, 0, 0, 0])])
def test_a_shape_that_is_a_multiple_of_16_folds_the_chunk_min(runtime, cols, expected):
    """Worked by hand: 32 columns are four whole chunks (no min left in the kernel), 20 end in a chunk of 4."""
    client = cp.client(runtime)
    t, out = cp.TensorArg(client.zeros((2, cols), np.uint32)), client.zeros((6,), np.uint32)
    row_chunks.launch(client, cp.CubeCount(1), cp.CubeDim(6), t, cp.ArrayArg(out))
    np.testing.assert_array_equal(client.read(out), np.array(expected, np.uint32))
    compiled = row_chunks.compile(cp.CubeDim(6), t, cp.ArrayArg(out), target="sm_80")
    assert (_mins(compiled.definition) == 0) == (cols % 16 == 0)
    assert ("shape multiples of 1x16" in format_kernel(compiled.definition)) == (cols % 16 == 0)
