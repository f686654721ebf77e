"""TMA round trip: each cube loads a tile through TMA, transforms it in shared memory, and stores it back.

The tile is ``ROWS x COLS`` f32 at ``(CUBE_POS_Y * ROWS, CUBE_POS_X * COLS)``.  The matrix is not a
multiple of the tile, so edge tiles read zeros past the tensor (the load still delivers the full box
of bytes to the barrier) and the store writes only the in-bounds part.
"""

from __future__ import annotations

import numpy as np

import cubepy as cp
from cubepy import CUBE_DIM, CUBE_POS_X, CUBE_POS_Y, UNIT_POS, Comptime, TensorMap, cube, f32

ROWS, COLS = 16, 32


@cube(launch=True)
def tma_roundtrip(src: TensorMap[f32], dst: TensorMap[f32], scale: f32, rows: Comptime[int], cols: Comptime[int]):
    """dst = scale * src + 1, tile by tile, through TMA loads and stores."""
    size = rows * cols
    bar = cp.Barrier.shared(CUBE_DIM, UNIT_POS == 0)
    tile = cp.SharedMemory.aligned(f32, size, 128)
    y = CUBE_POS_Y * rows
    x = CUBE_POS_X * cols

    # One unit issues the copy and expects its bytes; every unit arrives and waits for the phase.
    if UNIT_POS == 0:
        bar.tma_load_2d(src, tile, y, x)
    bar.wait(bar.arrive_and_expect_tx(1, cp.select(UNIT_POS == 0, cp.u32(size * 4), cp.u32(0))))

    for i in range(UNIT_POS, size, CUBE_DIM):
        tile[i] = scale * tile[i] + 1.0

    # The store reads shared memory through the async proxy: fence this unit's writes, then sync.
    cp.sync_async_proxy_shared()
    cp.sync_cube()
    if UNIT_POS == 0:
        cp.tma_store_2d(tile, dst, y, x)
        cp.tma_group_commit()
        cp.tma_group_wait_read(0)  # the tile must stay valid until the store has read it


def run(client, m: int = 40, n: int = 72, scale: float = 2.0) -> dict:
    """Transform a random m x n matrix and compare with numpy."""
    a = np.random.default_rng(4).standard_normal((m, n)).astype(np.float32)
    src, dst = client.create(a), client.zeros((m, n), np.float32)
    tma_roundtrip.launch(
        client,
        cp.CubeCount(-(-n // COLS), -(-m // ROWS)),
        cp.CubeDim(128),
        cp.TensorMapArg.tiled(cp.TensorArg(src), (ROWS, COLS)),
        cp.TensorMapArg.tiled(cp.TensorArg(dst), (ROWS, COLS)),
        scale,
        ROWS,
        COLS,
    )
    err = float(np.max(np.abs(client.read(dst) - (scale * a.astype(np.float64) + 1.0))))
    return {"tma round trip max error": err}


if __name__ == "__main__":
    print(run(cp.client()))
