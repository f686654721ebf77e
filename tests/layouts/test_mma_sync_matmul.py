"""``cubepy_layouts.matmul.mma_sync_matmul`` against a float64 numpy reference, at ragged shapes."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import cubepy as cp
from cubepy_layouts.matmul import MmaSyncTiling, mma_sync_launch, mma_sync_matmul
from tests.compiler.conftest import needs_ptxas

# Half the spacing of the output type near 1 (round to nearest): the extra error of an f16/bf16 result.
OUTPUT_ROUNDING = {np.dtype(np.float32): 0.0, np.dtype(np.float16): 2.0**-11, np.dtype(ml_dtypes.bfloat16): 2.0**-8}


def check(got: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """|got - a @ b| within f32 accumulation over k (any order) plus the output type's rounding."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    exact = a64 @ b64
    k = a.shape[1]
    bound = (k + 1) * 2.0**-23 * (np.abs(a64) @ np.abs(b64))
    bound += OUTPUT_ROUNDING[got.dtype] * np.abs(exact) + 2.0**-24
    error = np.abs(got.astype(np.float64) - exact)
    assert np.all(error <= bound), (
        f"worst excess {np.max(error - bound)} at {np.unravel_index(np.argmax(error - bound), error.shape)}"
    )


@pytest.mark.parametrize(
    ("m", "n", "k", "dtype", "out_dtype"),
    [
        (37, 53, 29, np.float16, np.float32),
        (128, 64, 96, np.float16, np.float32),
        (128, 64, 96, ml_dtypes.bfloat16, np.float32),
        (70, 130, 40, ml_dtypes.bfloat16, ml_dtypes.bfloat16),
        (65, 9, 33, np.float16, np.float16),
        (1, 1, 1, np.float16, np.float32),
    ],
)
def test_matches_float64_numpy(client, m, n, k, dtype, out_dtype):
    rng = np.random.default_rng(m * 10007 + n * 101 + k)
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    out = mma_sync_matmul(client, client.create(a), client.create(b), out_dtype)
    got = client.read(out)
    assert got.shape == (m, n) and got.dtype == np.dtype(out_dtype)
    check(got, a, b)


def test_a_smaller_tiling(client):
    """One plane per cube (32 x 32 blocks, k steps of 16): the kernel is generic in its blocking."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal((45, 21)).astype(np.float16)
    b = rng.standard_normal((21, 40)).astype(np.float16)
    tiling = MmaSyncTiling(block_m=32, block_n=32, block_k=16, warps_m=1, warps_n=1)
    check(client.read(mma_sync_matmul(client, client.create(a), client.create(b), tiling=tiling)), a, b)


def test_bad_operands_are_named():
    client = cp.client("interp")
    a = client.zeros((4, 8), np.float16)
    with pytest.raises(cp.LaunchError, match=r"shapes \(4, 8\) @ \(7, 3\)"):
        mma_sync_matmul(client, a, client.zeros((7, 3), np.float16))
    with pytest.raises(cp.LaunchError, match="a of float32; expected one of float16, bfloat16"):
        mma_sync_matmul(client, client.zeros((4, 8), np.float32), client.zeros((8, 3), np.float32))
    with pytest.raises(cp.LaunchError, match="differ in dtype"):
        mma_sync_matmul(client, a, client.zeros((8, 3), ml_dtypes.bfloat16))


@needs_ptxas
def test_sm_80_ptx_has_no_spills():
    client = cp.client("interp")
    launch = mma_sync_launch(
        client.zeros((128, 96), np.float16), client.zeros((96, 64), np.float16), client.zeros((128, 64), np.float32)
    )
    compiled = launch.compile("sm_80")
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in compiled.ptx
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in compiled.ptx
    assert "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16" in compiled.ptx
    resources = compiled.resources
    assert resources.spill_store_bytes == 0 and resources.spill_load_bytes == 0 and resources.stack_bytes == 0
