"""Triton tutorial 05, layer normalization: the fused forward, and the backward in two kernels.

Forward (``_layer_norm_fwd_fused``): one cube per row; three passes over the row in blocks of ``block``
columns (the next power of two of ``N``, so one block for the tutorial's rows): the mean, the variance of
``x - mean``, then ``y = (x - mean) * rstd * w + b``; ``mean`` and ``rstd`` are stored for the backward.
Triton runs ``min(max(block // 256, 1), 8)`` warps; each unit here adds its columns ``u, u + units, ...`` of
a block into one f32 and ``cube_sum`` finishes the row.

Backward, stage 1 (``_layer_norm_bwd_dx_fused``): one cube per row computes ``dx`` from the row held in
registers, and adds its ``dy * xhat`` and ``dy`` into one of ``group`` partial rows of ``dW``/``dB``
(``row % group``).  Rows that share a partial row take turns under a spin lock, one per partial row; the
first cube to take a lock stores instead of adding (the count word next to the lock says whether one has).
Stage 2 (``_layer_norm_bwd_dwdb``): each cube sums ``block_n = 128`` columns of the partial rows, in
blocks of ``block_m = 32`` rows, with 4 warps; here a unit owns one column.

The element type of ``x``, ``y``, ``w``, ``b`` and the gradients is a type parameter (the tutorial tests f16);
statistics and sums are f32.  The row kernels read and write lines: launched with 16-byte lines when ``N`` is a
multiple of them (Triton vectorizes its loads to 16 bytes when it knows ``N`` is a multiple of 16), with lines of
one item otherwise, which is the scalar kernel.
"""

from __future__ import annotations

import numpy as np

import cubepy as cp
from cubepy import CUBE_POS, UNIT_POS, Array, Atomic, Comptime, Line, SharedMemory, Tensor, cube, f32, u32
from cubepy_layouts.reduce import cube_sum
from examples.triton import SassCase

F = cp.TypeVar("F", cp.Float)
MAX_FUSED_BYTES = 65536  # the tutorial's limit on a row's bytes
DWDB_BLOCK_M, DWDB_BLOCK_N, DWDB_UNITS = 32, 128, 128


def warps(block: int) -> int:
    """The tutorial's warps for a row block: ``min(max(block // 256, 1), 8)``."""
    return min(max(block // 256, 1), 8)


def units(block: int) -> int:
    """Units per cube for a row block of ``block`` columns."""
    return 32 * warps(block)


def row_block(n: int, itemsize: int) -> int:
    """The tutorial's BLOCK_SIZE: the next power of two of ``n``, refused past 64 KiB per row."""
    block = 1 << max(0, n - 1).bit_length()
    if block * itemsize > MAX_FUSED_BYTES:
        raise cp.LaunchError(f"layer norm: a row of {n} items of {itemsize} bytes is over 64 KiB")
    return max(block, 32)


@cube(launch=True, launch_unchecked=True)
def layer_norm_fwd(
    x: Tensor[Line[F]],
    y: Tensor[Line[F]],
    w: Array[Line[F]],
    b: Array[Line[F]],
    mean: Array[f32],
    rstd: Array[f32],
    eps: f32,
    block: Comptime[int],
):
    """y[r] = (x[r] - mean) * rstd * w + b for the row r = CUBE_POS, a line at a time; stores its mean and rstd.

    ``block`` counts items; every row is a whole number of lines."""
    lanes = x.line_size
    step = units(block)
    row = CUBE_POS
    n = x.shape(1) // lanes  # lines per row
    x_row = row * (x.stride(0) // lanes)
    y_row = row * (y.stride(0) // lanes)
    total = Line(f32(0.0), lanes)
    for off in range(0, n, block // lanes):
        for i in cp.unroll(range(block // lanes // step)):
            col = off + UNIT_POS + i * step
            if col < n:
                total += Line[f32](x[x_row + col])
    row_mean = cube_sum(cp.vector_sum(total)) / f32(x.shape(1))
    squares = Line(f32(0.0), lanes)
    for off in range(0, n, block // lanes):
        for i in cp.unroll(range(block // lanes // step)):
            col = off + UNIT_POS + i * step
            if col < n:
                d = Line[f32](x[x_row + col]) - row_mean
                squares += d * d
    row_rstd = 1.0 / cp.sqrt(cube_sum(cp.vector_sum(squares)) / f32(x.shape(1)) + eps)
    if UNIT_POS == 0:
        mean[row] = row_mean
        rstd[row] = row_rstd
    for off in range(0, n, block // lanes):
        for i in cp.unroll(range(block // lanes // step)):
            col = off + UNIT_POS + i * step
            if col < n:
                x_hat = (Line[f32](x[x_row + col]) - row_mean) * row_rstd
                y[y_row + col] = Line[F](x_hat * Line[f32](w[col]) + Line[f32](b[col]))


@cube(launch=True, launch_unchecked=True)
def layer_norm_bwd_dx(
    dx: Tensor[Line[F]],
    dy: Tensor[Line[F]],
    dw_partial: Array[Line[F]],
    db_partial: Array[Line[F]],
    x: Tensor[Line[F]],
    w: Array[Line[F]],
    mean: Array[f32],
    rstd: Array[f32],
    locks: Array[Atomic[u32]],
    group: u32,
    block: Comptime[int],
):
    """dx of the row CUBE_POS (the whole row is one block), and its dW/dB terms added into partial row
    ``CUBE_POS % group`` under that row's lock (``locks[i]``; ``locks[group + i]`` counts the rows added)."""
    lanes = x.line_size
    step = units(block)
    row = CUBE_POS
    n = x.shape(1) // lanes  # lines per row
    x_row = row * (x.stride(0) // lanes)
    dy_row = row * (dy.stride(0) // lanes)
    row_mean = mean[row]
    row_rstd = rstd[row]
    zero = Line(f32(0.0), lanes)
    x_hats = []
    dys = []
    wdys = []
    dot_xw = f32(0.0)
    sum_w = f32(0.0)
    for i in cp.unroll(range(block // lanes // step)):
        col = UNIT_POS + i * step
        inside = col < n
        # past the row every term is 0, as Triton's masked loads with other=0 and its where(mask, ..., 0)
        x_hat = (Line[f32](x[x_row + col]) - row_mean) * row_rstd if inside else zero
        g = Line[f32](dy[dy_row + col]) if inside else zero
        wdy = Line[f32](w[col]) * g if inside else zero
        x_hats.append(x_hat)
        dys.append(g)
        wdys.append(wdy)
        dot_xw += cp.vector_sum(x_hat * wdy)
        sum_w += cp.vector_sum(wdy)
    c1 = cube_sum(dot_xw) / f32(x.shape(1))
    c2 = cube_sum(sum_w) / f32(x.shape(1))
    dx_row = row * (dx.stride(0) // lanes)
    for i in cp.unroll(range(block // lanes // step)):
        col = UNIT_POS + i * step
        if col < n:
            dx[dx_row + col] = Line[F]((wdys[i] - (x_hats[i] * c1 + c2)) * row_rstd)
    lock_id = row % group
    added = SharedMemory[u32](1)
    if UNIT_POS == 0:
        while locks[lock_id].compare_exchange(u32(0), u32(1)) != u32(0):
            pass
        added[0] = locks[group + lock_id].exchange(u32(1))  # 0: no row has been added yet, store
        cp.fence("device")  # the partial row's reads below stay after the lock is taken
    cp.sync_cube()
    first = added[0] == u32(0)
    partial_row = lock_id * n
    for i in cp.unroll(range(block // lanes // step)):
        col = UNIT_POS + i * step
        if col < n:
            pdw = Line[F](dys[i] * x_hats[i])
            pdb = Line[F](dys[i])
            if not first:
                pdw += dw_partial[partial_row + col]
                pdb += db_partial[partial_row + col]
            dw_partial[partial_row + col] = pdw
            db_partial[partial_row + col] = pdb
    cp.fence("device")  # this unit's partial-row writes are visible before the lock is seen free
    cp.sync_cube()  # every unit has written (Triton's debug_barrier)
    if UNIT_POS == 0:
        locks[lock_id].exchange(u32(0))


@cube(launch=True, launch_unchecked=True)
def layer_norm_bwd_dwdb(
    dw_partial: Array[F], db_partial: Array[F], dw: Array[F], db: Array[F], rows: u32, block_m: Comptime[int]
):
    """dw[c] = sum of dw_partial[:, c] over ``rows`` partial rows (db alike); one column per unit."""
    n = dw.len()
    col = CUBE_POS * DWDB_BLOCK_N + UNIT_POS
    sum_dw = f32(0.0)
    sum_db = f32(0.0)
    if col < n:
        for r0 in range(0, rows, block_m):
            for r in cp.unroll(range(block_m)):
                if r0 + r < rows:
                    sum_dw += f32(dw_partial[(r0 + r) * n + col])
                    sum_db += f32(db_partial[(r0 + r) * n + col])
        dw[col] = F(sum_dw)
        db[col] = F(sum_db)


def group_size(n: int) -> int:
    """The tutorial's GROUP_SIZE_M: how many partial rows of dW/dB, by row length."""
    if n <= 1024:
        return 256
    if n <= 4096:
        return 128
    if n <= 8192:
        return 96
    return 64


def line_size(n: int, itemsize: int) -> int:
    """Items per line for rows of ``n``: 16 bytes when every unit's share of a row block is a whole number of
    16-byte lines, else the largest power of two that is (1 for a ragged ``n``)."""
    block = row_block(n, itemsize)
    lanes = min(16 // itemsize, block // units(block))
    while n % lanes:
        lanes //= 2
    return lanes


def forward(client, x, w, b, eps: float = 1e-5, lanes: int | None = None):
    """``(y, mean, rstd)`` of the handle ``x`` (M x N) with weights ``w`` and biases ``b`` (N); ``lanes``: the
    line size (None: ``line_size``)."""
    m, n = x.shape
    itemsize = np.dtype(x.dtype).itemsize
    block = row_block(n, itemsize)
    size = {"line_size": lanes or line_size(n, itemsize)}
    y = client.empty((m, n), x.dtype)
    mean, rstd = client.empty((m,), np.float32), client.empty((m,), np.float32)
    args = [cp.TensorArg(x, **size), cp.TensorArg(y, **size), cp.ArrayArg(w, **size), cp.ArrayArg(b, **size)]
    args += [cp.ArrayArg(mean), cp.ArrayArg(rstd), cp.ScalarArg(eps, f32), block]
    layer_norm_fwd.launch(client, cp.CubeCount(m), cp.CubeDim(units(block)), *args)
    return y, mean, rstd


def backward(client, dy, x, w, mean, rstd, lanes: int | None = None):
    """``(dx, dw, db)`` from the output gradient ``dy`` and the forward's ``x``, ``w``, ``mean``, ``rstd``."""
    m, n = x.shape
    itemsize = np.dtype(x.dtype).itemsize
    block = row_block(n, itemsize)
    size = {"line_size": lanes or line_size(n, itemsize)}
    group = group_size(n)
    locks = client.zeros((2 * group,), np.uint32)
    dw_partial, db_partial = client.zeros((group, n), w.dtype), client.zeros((group, n), w.dtype)
    dx = client.empty((m, n), x.dtype)
    args = [
        cp.TensorArg(dx, **size),
        cp.TensorArg(dy, **size),
        cp.ArrayArg(dw_partial, **size),
        cp.ArrayArg(db_partial, **size),
        cp.TensorArg(x, **size),
        cp.ArrayArg(w, **size),
        cp.ArrayArg(mean),
        cp.ArrayArg(rstd),
        cp.ArrayArg(locks),
        cp.ScalarArg(group, u32),
    ]
    layer_norm_bwd_dx.launch(client, cp.CubeCount(m), cp.CubeDim(units(block)), *args, block)
    dw, db = client.empty((n,), w.dtype), client.empty((n,), w.dtype)
    layer_norm_bwd_dwdb.launch(
        client,
        cp.CubeCount(-(-n // DWDB_BLOCK_N)),
        cp.CubeDim(DWDB_UNITS),
        cp.ArrayArg(dw_partial),
        cp.ArrayArg(db_partial),
        cp.ArrayArg(dw),
        cp.ArrayArg(db),
        cp.ScalarArg(min(group, m), u32),
        DWDB_BLOCK_M,
    )
    return dx, dw, db


def reference(x, w, b, dy, eps: float = 1e-5):
    """numpy (float64) ``y, dx, dw, db`` of the layer norm, from the formulas of the tutorial."""
    x, w, b, dy = (np.asarray(a, np.float64) for a in (x, w, b, dy))
    n = x.shape[1]
    mu = x.mean(axis=1, keepdims=True)
    rs = 1.0 / np.sqrt(((x - mu) ** 2).mean(axis=1, keepdims=True) + eps)
    x_hat = (x - mu) * rs
    wdy = w * dy
    c1 = (x_hat * wdy).sum(axis=1, keepdims=True) / n
    c2 = wdy.sum(axis=1, keepdims=True) / n
    dx = (wdy - (x_hat * c1 + c2)) * rs
    return x_hat * w + b, dx, (dy * x_hat).sum(axis=0), dy.sum(axis=0)


def run(
    client, m: int = 1151, n: int = 8192, dtype=np.float16, eps: float = 1e-5, lanes: int | None = None
) -> dict[str, float]:
    """Forward and backward on the tutorial's data (``x = -2.3 + 0.5 randn``, ``dy = 0.1 randn``), max errors
    against numpy in float64 (the tutorial checks f16 with atol 1e-2); ``lanes``: the line size (None: the
    widest that fits, 1 for a ragged ``n``)."""
    rng = np.random.default_rng(5)
    x = (-2.3 + 0.5 * rng.standard_normal((m, n))).astype(dtype)
    w, b = rng.random(n).astype(dtype), rng.random(n).astype(dtype)
    dy = (0.1 * rng.standard_normal((m, n))).astype(dtype)
    hx, hw = client.create(x), client.create(w)
    y, mean, rstd = forward(client, hx, hw, client.create(b), eps, lanes)
    dx, dw, db = backward(client, client.create(dy), hx, hw, mean, rstd, lanes)
    want = reference(x, w, b, dy, eps)
    got = [client.read(h).astype(np.float64) for h in (y, dx, dw, db)]
    names = ("y", "dx", "dw", "db")
    return {f"layer norm {k} max error": float(np.max(np.abs(g - e))) for k, g, e in zip(names, got, want)}


def _build(which: str, lanes: int = 1):
    """A ``SassCase.build``: one of the kernels for the tutorial's f16 1151 x 8192, rows in lines of ``lanes``,
    compiled for the cube count its launch uses (one cube per row)."""

    def build(target: str = "sm_90a", **options):
        client = cp.client("interp")
        m, n = 1151, 8192
        block, group = row_block(n, 2), group_size(n)
        size = {"line_size": lanes}

        def mat():
            return cp.TensorArg(client.zeros((m, n), np.float16), **size)

        def vec(rows=1):
            return cp.ArrayArg(client.zeros((rows * n,), np.float16), **size)

        stats = [cp.ArrayArg(client.zeros((m,), np.float32)) for _ in range(2)]
        if which == "fwd":
            args = [mat(), mat(), vec(), vec(), *stats, cp.ScalarArg(1e-5, f32), block]
            return layer_norm_fwd.compile(
                cp.CubeDim(units(block)), *args, target=target, cube_count=cp.CubeCount(m), **options
            )
        if which == "dx":
            args = [mat(), mat(), vec(group), vec(group), mat(), vec(), *stats]
            args += [cp.ArrayArg(client.zeros((2 * group,), np.uint32)), cp.ScalarArg(group, u32), block]
            return layer_norm_bwd_dx.compile(
                cp.CubeDim(units(block)), *args, target=target, cube_count=cp.CubeCount(m), **options
            )
        partial = [cp.ArrayArg(client.zeros((group * n,), np.float16)) for _ in range(2)]
        outs = [cp.ArrayArg(client.zeros((n,), np.float16)) for _ in range(2)]
        args = [*partial, *outs, cp.ScalarArg(group, u32), DWDB_BLOCK_M]
        return layer_norm_bwd_dwdb.compile(cp.CubeDim(DWDB_UNITS), *args, target=target, **options)

    return build


# f16, the tutorial's test and what benchmarks.triton_specs compiles Triton's kernels for.  Lines of
# 8 (16 bytes) are what Triton gets for N = 8192; lines of 1 are the kernels a ragged N runs.
_FWD = "_layer_norm_fwd_fused"
SASS_CASES: list[SassCase] = [
    SassCase("05 layer norm", "forward, Line[f16]x8", _build("fwd", 8), _FWD, measure="loop"),
    SassCase("05 layer norm", "forward, Line[f16]x8", _build("fwd", 8), _FWD),
    SassCase("05 layer norm", "forward, f16 (lines of 1)", _build("fwd"), _FWD, measure="loop", triton_ragged=True),
    SassCase("05 layer norm", "forward, f16 (lines of 1)", _build("fwd"), _FWD, triton_ragged=True),
    SassCase(
        "05 layer norm", "backward dx + locked partials, Line[f16]x8", _build("dx", 8), "_layer_norm_bwd_dx_fused"
    ),
    SassCase(
        "05 layer norm",
        "backward dx + locked partials, f16 (lines of 1)",
        _build("dx"),
        "_layer_norm_bwd_dx_fused",
        triton_ragged=True,
    ),
    SassCase("05 layer norm", "backward dW/dB column sums, f16", _build("dwdb"), "_layer_norm_bwd_dwdb"),
]
