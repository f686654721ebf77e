"""``cp.mma_sync``, ``cp.ldmatrix``, ``cp.stmatrix`` on the runtimes: per-unit fragments against the PTX ISA.

The expected layouts are written here by hand from the PTX ISA's "Matrix Fragments for mma.m16n8k16 /
m16n8k8 / m16n8k32" and "ldmatrix" sections, as the ISA states them (if/else on the element number),
independently of ``cubepy.ir.ops.mma``'s tables; results come from numpy in float64 / int64.
"""

from __future__ import annotations

import numpy as np
import pytest

import cubepy as cp
from cubepy import UNIT_POS_PLANE, Array, SharedMemory, bf16, cube, f16, f32, i8, i32, u32

PLANE = 32


# -- the PTX ISA's fragment tables, by hand -------------------------------------------------------------
def isa_m16n8k16(operand: str, lane: int, i: int) -> tuple[int, int]:
    """(row, col) of element i of lane's f16/bf16 m16n8k16 fragment."""
    group, tid = lane >> 2, lane % 4
    if operand == "a":  # a0..a7
        row = group if i in (0, 1, 4, 5) else group + 8
        col = tid * 2 + (i & 1) if i < 4 else tid * 2 + (i & 1) + 8
        return row, col
    if operand == "b":  # b0..b3
        row = tid * 2 + (i & 1) if i < 2 else tid * 2 + (i & 1) + 8
        return row, group
    row = group if i < 2 else group + 8  # c0..c3 / d0..d3
    return row, tid * 2 + (i & 1)


def isa_m16n8k8_tf32(operand: str, lane: int, i: int) -> tuple[int, int]:
    """(row, col) of element i of lane's tf32 m16n8k8 fragment."""
    group, tid = lane >> 2, lane % 4
    if operand == "a":  # a0..a3
        row = group if i in (0, 2) else group + 8
        col = tid if i in (0, 1) else tid + 4
        return row, col
    if operand == "b":  # b0, b1
        return (tid if i == 0 else tid + 4), group
    row = group if i < 2 else group + 8
    return row, tid * 2 + (i & 1)


def isa_m16n8k32_s8(operand: str, lane: int, i: int) -> tuple[int, int]:
    """(row, col) of element i of lane's s8 m16n8k32 fragment."""
    group, tid = lane >> 2, lane % 4
    if operand == "a":  # a0..a15
        row = group if (0 <= i < 4 or 8 <= i < 12) else group + 8
        col = tid * 4 + (i & 3) if i < 8 else tid * 4 + (i & 3) + 16
        return row, col
    if operand == "b":  # b0..b7
        row = tid * 4 + (i & 3) if i < 4 else tid * 4 + (i & 3) + 16
        return row, group
    row = group if i < 2 else group + 8
    return row, tid * 2 + (i & 1)


# shape -> (m, n, k, hand table, input numpy type, input cube type, accumulator numpy type, cube type,
#           items of a, b, c)
SHAPES = {
    "m16n8k16-f16": ("m16n8k16", 16, 8, 16, isa_m16n8k16, np.float16, f16, np.float32, f32, (8, 4, 4)),
    "m16n8k16-bf16": ("m16n8k16", 16, 8, 16, isa_m16n8k16, None, bf16, np.float32, f32, (8, 4, 4)),
    "m16n8k8-tf32": ("m16n8k8", 16, 8, 8, isa_m16n8k8_tf32, np.float32, f32, np.float32, f32, (4, 2, 4)),
    "m16n8k32-s8": ("m16n8k32", 16, 8, 32, isa_m16n8k32_s8, np.int8, i8, np.int32, i32, (16, 8, 4)),
}


def pack(matrix: np.ndarray, table, operand: str, length: int) -> np.ndarray:
    """Per-lane fragments ``(32, length)`` of ``matrix`` by the hand table."""
    out = np.empty((PLANE, length), dtype=matrix.dtype)
    for lane in range(PLANE):
        for i in range(length):
            out[lane, i] = matrix[table(operand, lane, i)]
    return out


def unpack(fragments: np.ndarray, table, operand: str, shape: tuple[int, int]) -> np.ndarray:
    """The matrix that per-lane ``fragments`` hold, by the hand table."""
    out = np.zeros(shape, dtype=fragments.dtype)
    for lane in range(PLANE):
        for i in range(fragments.shape[1]):
            out[table(operand, lane, i)] = fragments[lane, i]
    return out


KERNELS: dict = {}


def fragment_kernel(shape: str, elem, acc, lengths: tuple[int, int, int]):
    """d = a @ b + c where every unit loads its registers from per-lane arrays (no index helper involved)."""
    key = (shape, elem, acc)
    if key not in KERNELS:
        la, lb, lc = lengths

        @cube(launch=True)
        def mma_fragments(a: Array[elem], b: Array[elem], c: Array[acc], d: Array[acc]):
            fa = cp.mma_fragment(shape, "a", elem)
            fb = cp.mma_fragment(shape, "b", elem)
            fc = cp.mma_fragment(shape, "c", acc)
            lane = UNIT_POS_PLANE + cp.PLANE_POS * 32
            for i in cp.unroll(range(la)):
                fa[i] = a[lane * la + i]
            for i in cp.unroll(range(lb)):
                fb[i] = b[lane * lb + i]
            for i in cp.unroll(range(lc)):
                fc[i] = c[lane * lc + i]
            fd = cp.mma_sync(shape, fa, fb, fc)
            for i in cp.unroll(range(lc)):
                d[lane * lc + i] = fd[i]

        KERNELS[key] = mma_fragments
    return KERNELS[key]


def random_inputs(case: str, rng: np.random.Generator, planes: int):
    shape, m, n, k, table, a_np, elem, acc_np, acc, lengths = SHAPES[case]
    if elem == i8:
        a = rng.integers(-128, 128, (planes, m, k)).astype(np.int8)
        b = rng.integers(-128, 128, (planes, k, n)).astype(np.int8)
        c = rng.integers(-(2**20), 2**20, (planes, m, n)).astype(np.int32)
    else:
        a = rng.standard_normal((planes, m, k))
        b = rng.standard_normal((planes, k, n))
        if elem == f32:  # tf32: values exact in 10 mantissa bits, so truncation and rounding agree
            a, b = np.round(a * 64) / 64, np.round(b * 64) / 64
        a, b = a.astype(elem.numpy), b.astype(elem.numpy)
        c = rng.standard_normal((planes, m, n)).astype(np.float32)
    return a, b, c


def run_fragments(client, case: str, a, b, c):
    """Launch on ``len(a)`` planes with per-lane fragments packed by the hand tables; the d matrices back."""
    shape, m, n, k, table, a_np, elem, acc_np, acc, (la, lb, lc) = SHAPES[case]
    planes = len(a)
    fa = np.concatenate([pack(x, table, "a", la) for x in a]).ravel()
    fb = np.concatenate([pack(x, table, "b", lb) for x in b]).ravel()
    fc = np.concatenate([pack(x, table, "c", lc) for x in c]).ravel()
    out = client.zeros((planes * PLANE * lc,), acc.numpy)
    fragment_kernel(shape, elem, acc, (la, lb, lc)).launch(
        client,
        cp.CubeCount(1),
        cp.CubeDim(PLANE * planes),
        cp.ArrayArg(client.create(fa)),
        cp.ArrayArg(client.create(fb)),
        cp.ArrayArg(client.create(fc)),
        cp.ArrayArg(out),
    )
    d = client.read(out).reshape(planes, PLANE, lc)
    return np.stack([unpack(x, table, "d", (m, n)) for x in d])


def assert_within_f32_bound(got, a, b, c, k: int) -> None:
    """|got - exact| <= (k + 1) 2^-23 (|a| @ |b| + |c|): f32 accumulation in any order (products exact)."""
    a64, b64, c64 = a.astype(np.float64), b.astype(np.float64), c.astype(np.float64)
    exact = a64 @ b64 + c64
    bound = (k + 1) * 2.0**-23 * (np.abs(a64) @ np.abs(b64) + np.abs(c64))
    assert np.all(np.abs(got - exact) <= bound), np.max(np.abs(got - exact) - bound)


@pytest.mark.parametrize("case", sorted(SHAPES))
def test_mma_sync_against_numpy(client, case):
    """Two planes, each its own matrices; fragments packed and unpacked by the hand-built ISA tables."""
    rng = np.random.default_rng(14)
    a, b, c = random_inputs(case, rng, planes=2)
    got = run_fragments(client, case, a, b, c)
    if SHAPES[case][6] == i8:
        exact = a.astype(np.int64) @ b.astype(np.int64) + c
        np.testing.assert_array_equal(got, exact)
    else:
        assert_within_f32_bound(got, a, b, c, SHAPES[case][3])


def test_s8_accumulation_wraps_modulo_2_32(client):
    """Without .satfinite the s32 accumulator wraps."""
    a = np.full((1, 16, 32), 127, dtype=np.int8)
    b = np.full((1, 32, 8), 127, dtype=np.int8)
    c = np.full((1, 16, 8), 2**31 - 1000, dtype=np.int32)
    got = run_fragments(client, "m16n8k32-s8", a, b, c)
    expected = ((a.astype(np.int64) @ b.astype(np.int64) + c) + 2**31) % 2**32 - 2**31
    np.testing.assert_array_equal(got, expected)


def test_tf32_ignores_the_low_mantissa_bits(client):
    """A tf32 input keeps 10 mantissa bits: 1 + 2^-11 multiplies as 1."""
    a = np.zeros((1, 16, 8), np.float32)
    b = np.zeros((1, 8, 8), np.float32)
    a[0, :, 0] = 1 + 2.0**-11
    b[0, 0, :] = 1.0
    got = run_fragments(client, "m16n8k8-tf32", a, b, np.zeros((1, 16, 8), np.float32))
    np.testing.assert_array_equal(got, np.ones((1, 16, 8), np.float32))


# -- the index helper against the hand tables ---------------------------------------------------------
def index_kernel(shape: str, operand: str, length: int, comptime: bool):
    key = ("index", shape, operand, comptime)
    if key not in KERNELS:

        @cube(launch=True)
        def fragment_indices(rows: Array[u32], cols: Array[u32]):
            if cp.comptime(comptime):
                for i in cp.unroll(range(length)):
                    r, c = cp.mma_fragment_index(shape, operand, i)
                    rows[UNIT_POS_PLANE * length + i] = r
                    cols[UNIT_POS_PLANE * length + i] = c
            else:
                for i in range(length):
                    r, c = cp.mma_fragment_index(shape, operand, i)
                    rows[UNIT_POS_PLANE * length + i] = r
                    cols[UNIT_POS_PLANE * length + i] = c

        KERNELS[key] = fragment_indices
    return KERNELS[key]


@pytest.mark.parametrize("comptime", [True, False], ids=["comptime-i", "runtime-i"])
@pytest.mark.parametrize("case", ["m16n8k16-f16", "m16n8k8-tf32", "m16n8k32-s8"])
@pytest.mark.parametrize("operand", ["a", "b", "c", "d"])
def test_fragment_index_is_the_isa_table(client, case, operand, comptime):
    shape, table, lengths = SHAPES[case][0], SHAPES[case][4], SHAPES[case][-1]
    length = {"a": lengths[0], "b": lengths[1]}.get(operand, lengths[2])
    rows, cols = client.zeros((PLANE * length,), np.uint32), client.zeros((PLANE * length,), np.uint32)
    index_kernel(shape, operand, length, comptime).launch(
        client, cp.CubeCount(1), cp.CubeDim(PLANE), cp.ArrayArg(rows), cp.ArrayArg(cols)
    )
    got = np.stack([client.read(rows), client.read(cols)], axis=1).reshape(PLANE, length, 2)
    expected = np.array([[table(operand, lane, i) for i in range(length)] for lane in range(PLANE)])
    np.testing.assert_array_equal(got, expected)


# -- a wrong index gives the wrong answer hardware would -------------------------------------------------
@cube(launch=True)
def swapped_a_halves(a: Array[f16], b: Array[f16], out: Array[f32]):
    """Loads a with the k halves exchanged for a4..a7 (a deliberate bug: ``col - 8`` where ``+ 8`` is due)."""
    fa = cp.mma_fragment("m16n8k16", "a", f16)
    fb = cp.mma_fragment("m16n8k16", "b", f16)
    fc = cp.mma_fragment("m16n8k16", "c", f32)
    for i in cp.unroll(range(8)):
        r, c = cp.mma_fragment_index("m16n8k16", "a", i)
        if cp.comptime(i >= 4):
            fa[i] = a[r * 16 + c - 8]  # the bug: reads columns 0..7 again
        else:
            fa[i] = a[r * 16 + c]
    for i in cp.unroll(range(4)):
        r, c = cp.mma_fragment_index("m16n8k16", "b", i)
        fb[i] = b[r * 8 + c]
        fc[i] = 0.0
    cp.mma_sync("m16n8k16", fa, fb, fc, out=fc)
    for i in cp.unroll(range(4)):
        r, c = cp.mma_fragment_index("m16n8k16", "c", i)
        out[r * 8 + c] = fc[i]


def test_a_wrong_fragment_index_gives_the_wrong_answer_hardware_would(client):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((16, 16)).astype(np.float16)
    b = rng.standard_normal((16, 8)).astype(np.float16)
    out = client.zeros((128,), np.float32)
    swapped_a_halves.launch(
        client,
        cp.CubeCount(1),
        cp.CubeDim(PLANE),
        cp.ArrayArg(client.create(a.ravel())),
        cp.ArrayArg(client.create(b.ravel())),
        cp.ArrayArg(out),
    )
    got = client.read(out).reshape(16, 8)
    # What the tensor core sees: by the ISA, a4..a7 are columns 8..15, and the kernel put columns 0..7 there.
    seen = np.concatenate([a[:, :8], a[:, :8]], axis=1)
    assert_within_f32_bound(got, seen, b, np.zeros((16, 8), np.float32), 16)
    assert not np.allclose(got, a.astype(np.float64) @ b.astype(np.float64), atol=1e-2)


# -- ldmatrix / stmatrix ------------------------------------------------------------------------------------
def isa_ldmatrix_lane(rows: list[np.ndarray], lane: int, count: int, trans: bool) -> list:
    """Lane's 2 count elements: matrix j's row lane // 4, columns 2 (lane % 4) and + 1 (trans: transposed)."""
    out = []
    for j in range(count):
        matrix = np.stack(rows[8 * j : 8 * j + 8])  # row r is the 8 items at lane 8j + r's address
        for e in range(2):
            out.append(matrix[2 * (lane % 4) + e, lane // 4] if trans else matrix[lane // 4, 2 * (lane % 4) + e])
    return out


SMEM_ITEMS = 8 * 40


def matrix_kernels(count: int, trans: bool):
    key = ("matrix", count, trans)
    if key not in KERNELS:

        @cube(launch=True)
        def load_matrices(src: Array[f16], offsets: Array[u32], out: Array[f16]):
            tile = SharedMemory[f16](SMEM_ITEMS)
            for i in range(UNIT_POS_PLANE, SMEM_ITEMS, 32):
                tile[i] = src[i]
            cp.sync_cube()
            frag = cp.ldmatrix(tile, offsets[UNIT_POS_PLANE], count, trans)
            for e in cp.unroll(range(2 * count)):
                out[UNIT_POS_PLANE * (2 * count) + e] = frag[e]

        @cube(launch=True)
        def store_matrices(fragments: Array[f16], offsets: Array[u32], out: Array[f16]):
            tile = SharedMemory[f16](SMEM_ITEMS)
            for i in range(UNIT_POS_PLANE, SMEM_ITEMS, 32):
                tile[i] = f16(-1.0)
            cp.sync_cube()
            frag = cp.LocalArray[f16](2 * count)
            for e in cp.unroll(range(2 * count)):
                frag[e] = fragments[UNIT_POS_PLANE * (2 * count) + e]
            cp.stmatrix(tile, offsets[UNIT_POS_PLANE], frag, count, trans)
            cp.sync_cube()
            for i in range(UNIT_POS_PLANE, SMEM_ITEMS, 32):
                out[i] = tile[i]

        KERNELS[key] = (load_matrices, store_matrices)
    return KERNELS[key]


def row_offsets(rng: np.random.Generator) -> np.ndarray:
    """32 distinct 16-byte-aligned row offsets in a scrambled order (lanes past the count are ignored)."""
    return (rng.permutation(SMEM_ITEMS // 8)[:PLANE] * 8).astype(np.uint32)


@pytest.mark.parametrize("trans", [False, True], ids=["plain", "trans"])
@pytest.mark.parametrize("count", [1, 2, 4])
def test_ldmatrix_gives_each_lane_the_isa_elements(client, count, trans):
    rng = np.random.default_rng(count + 10 * trans)
    src = np.arange(SMEM_ITEMS, dtype=np.float16)
    offsets = row_offsets(rng)
    out = client.zeros((PLANE * 2 * count,), np.float16)
    load, _ = matrix_kernels(count, trans)
    load.launch(
        client,
        cp.CubeCount(1),
        cp.CubeDim(PLANE),
        cp.ArrayArg(client.create(src)),
        cp.ArrayArg(client.create(offsets)),
        cp.ArrayArg(out),
    )
    rows = [src[o : o + 8] for o in offsets]
    expected = [isa_ldmatrix_lane(rows, lane, count, trans) for lane in range(PLANE)]
    np.testing.assert_array_equal(client.read(out).reshape(PLANE, 2 * count), np.array(expected, np.float16))


@pytest.mark.parametrize("trans", [False, True], ids=["plain", "trans"])
@pytest.mark.parametrize("count", [1, 2, 4])
def test_stmatrix_writes_what_ldmatrix_would_read(client, count, trans):
    rng = np.random.default_rng(100 + count + 10 * trans)
    fragments = rng.permutation(PLANE * 2 * count).astype(np.float16).reshape(PLANE, 2 * count)
    offsets = row_offsets(rng)
    out = client.zeros((SMEM_ITEMS,), np.float16)
    _, store = matrix_kernels(count, trans)
    store.launch(
        client,
        cp.CubeCount(1),
        cp.CubeDim(PLANE),
        cp.ArrayArg(client.create(fragments.ravel())),
        cp.ArrayArg(client.create(offsets)),
        cp.ArrayArg(out),
    )
    expected = np.full(SMEM_ITEMS, -1.0, np.float16)
    for lane in range(PLANE):  # the inverse of the ldmatrix distribution, element by element
        for j in range(count):
            for e in range(2):
                r, c = (2 * (lane % 4) + e, lane // 4) if trans else (lane // 4, 2 * (lane % 4) + e)
                expected[offsets[8 * j + r] + c] = fragments[lane, 2 * j + e]
    np.testing.assert_array_equal(client.read(out), expected)


# -- misuse ---------------------------------------------------------------------------------------------------
@cube(launch=True)
def ldmatrix_past_the_end(out: Array[f16]):
    tile = SharedMemory[f16](64)
    tile[UNIT_POS_PLANE] = f16(0.0)
    tile[UNIT_POS_PLANE + 32] = f16(0.0)
    cp.sync_cube()
    frag = cp.ldmatrix(tile, UNIT_POS_PLANE * 8, 1)  # lanes 0..7: rows 0..56, the last ends at item 64
    frag2 = cp.ldmatrix(tile, UNIT_POS_PLANE * 8, 2)  # lanes 8..15 point past the end
    out[UNIT_POS_PLANE] = frag[0] + frag2[0]


@cube(launch=True)
def ldmatrix_misaligned(out: Array[f16]):
    tile = SharedMemory[f16](128)
    for i in range(UNIT_POS_PLANE, 128, 32):
        tile[i] = f16(0.0)
    cp.sync_cube()
    frag = cp.ldmatrix(tile, UNIT_POS_PLANE * 8 + 4, 1)
    out[UNIT_POS_PLANE] = frag[0]


@cube(launch=True)
def mma_by_half_a_plane(out: Array[f32]):
    fa = cp.mma_fragment("m16n8k16", "a", f16)
    fb = cp.mma_fragment("m16n8k16", "b", f16)
    fc = cp.mma_fragment("m16n8k16", "c", f32)
    for i in cp.unroll(range(8)):
        fa[i] = f16(1.0)
    for i in cp.unroll(range(4)):
        fb[i] = f16(1.0)
        fc[i] = 0.0
    if UNIT_POS_PLANE < 16:
        cp.mma_sync("m16n8k16", fa, fb, fc, out=fc)
    out[UNIT_POS_PLANE] = fc[0]


def test_misuse_is_reported(client):
    with pytest.raises(cp.SanitizerError, match=r"out-of-bounds: ldmatrix row 64\.\.71"):
        ldmatrix_past_the_end.launch(
            client, cp.CubeCount(1), cp.CubeDim(PLANE), cp.ArrayArg(client.zeros((32,), np.float16))
        )
    with pytest.raises(cp.SanitizerError, match="not 16-byte aligned"):
        ldmatrix_misaligned.launch(
            client, cp.CubeCount(1), cp.CubeDim(PLANE), cp.ArrayArg(client.zeros((32,), np.float16))
        )
    with pytest.raises(cp.SanitizerError, match="every unit of the plane"):
        mma_by_half_a_plane.launch(
            client, cp.CubeCount(1), cp.CubeDim(PLANE), cp.ArrayArg(client.zeros((32,), np.float32))
        )


@cube(launch=True)
def ldmatrix_of_unwritten_rows(out: Array[f16]):
    tile = SharedMemory[f16](128)
    for i in range(UNIT_POS_PLANE, 64, 32):
        tile[i] = f16(0.0)  # rows 0..7 written, rows 8..15 not
    cp.sync_cube()
    frag = cp.ldmatrix(tile, UNIT_POS_PLANE * 8, 2)
    out[UNIT_POS_PLANE] = frag[2]


@cube(launch=True)
def stmatrix_racing_a_read(out: Array[f16]):
    """Plane 1 reads what plane 0's stmatrix writes, with no sync_cube between them."""
    tile = SharedMemory[f16](256)
    frag = cp.LocalArray[f16](2)
    frag[0] = f16(1.0)
    frag[1] = f16(2.0)
    if cp.PLANE_POS == 0:
        cp.stmatrix(tile, UNIT_POS_PLANE * 8, frag, 1)
    else:
        out[UNIT_POS_PLANE] = tile[UNIT_POS_PLANE]


def test_the_sanitizer_checks_ldmatrix_and_stmatrix_rows():
    client = cp.client("interp", sanitize=True)
    with pytest.raises(cp.SanitizerError, match="uninitialized read: shared memory .* index 64"):
        ldmatrix_of_unwritten_rows.launch(
            client, cp.CubeCount(1), cp.CubeDim(PLANE), cp.ArrayArg(client.zeros((32,), np.float16))
        )
    # Lockstep runs plane 0's stmatrix first (a race); a schedule that runs plane 1 first meets the read of
    # bytes nobody wrote yet: the same missing sync_cube, met from the other side.
    with pytest.raises(cp.SanitizerError, match="data race|uninitialized read"):
        stmatrix_racing_a_read.launch(
            client, cp.CubeCount(1), cp.CubeDim(2 * PLANE), cp.ArrayArg(client.zeros((32,), np.float16))
        )
