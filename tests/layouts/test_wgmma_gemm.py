"""The warp-specialized wgmma GEMM (TMA 128B-swizzled stages, full/empty barriers) against float64 numpy."""

import numpy as np
import pytest

import cubepy as cp
from cubepy_layouts.matmul import WgmmaGemmConfig, wgmma_gemm_launch, wgmma_matmul

# Odd M and N (ragged blocks), K not a multiple of the 64-wide k tile, and K = 200 (4 k tiles: the
# 3-stage ring wraps).
SHAPES = [(70, 40, 48), (100, 72, 200)]
IN_DTYPES = {"f16": np.float16, "bf16": cp.bf16.numpy}


def operands(m, n, k, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((n, k)).astype(dtype)


def reference(a, b_t):
    return a.astype(np.float64) @ b_t.astype(np.float64).T


def bound(a, b_t, out_dtype):
    """f32 accumulation of exact products (interp and tensor cores), then the output's own rounding."""
    magnitude = np.abs(a.astype(np.float64)) @ np.abs(b_t.astype(np.float64)).T
    accumulate = a.shape[1] * 2.0**-23 * magnitude
    rounding = {np.float32: 0.0, np.float16: 2.0**-11, "bf16": 2.0**-8}[out_dtype]
    return accumulate + rounding * np.abs(reference(a, b_t)) + 1e-30


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", ["f16", "bf16"])
def test_matches_numpy(client, shape, name):
    a, b_t = operands(*shape, IN_DTYPES[name])
    got = client.read(wgmma_matmul(client, client.create(a), client.create(b_t)))
    assert (np.abs(got - reference(a, b_t)) <= bound(a, b_t, np.float32)).all()


@pytest.mark.parametrize(("out_dtype", "key"), [(np.float16, np.float16), (cp.bf16.numpy, "bf16")], ids=["f16", "bf16"])
def test_half_precision_outputs(client, out_dtype, key):
    a, b_t = operands(*SHAPES[0], np.float16, seed=1)
    got = client.read(wgmma_matmul(client, client.create(a), client.create(b_t), out_dtype)).astype(np.float64)
    assert (np.abs(got - reference(a, b_t)) <= bound(a, b_t, key)).all()


@pytest.mark.parametrize(
    "options",
    [
        {"schedule": "random", "seed": 1},
        pytest.param({"schedule": "random", "seed": 2}, marks=pytest.mark.slow),  # a second seed: the slow tier
        pytest.param({"schedule": "adversarial"}, marks=pytest.mark.slow),  # the random one covers the default suite
    ],
    ids=["random:1", "random:2", "adversarial"],
)
def test_every_schedule_gives_the_result_with_the_sanitizer_silent(options):
    client = cp.client("interp", sanitize=True, **options)
    a, b_t = operands(*SHAPES[1], np.float16, seed=2)
    got = client.read(wgmma_matmul(client, client.create(a), client.create(b_t), config=WgmmaGemmConfig(stages=2)))
    assert (np.abs(got - reference(a, b_t)) <= bound(a, b_t, np.float32)).all()


@pytest.mark.parametrize("cluster_m", [1, 2, pytest.param(4, marks=pytest.mark.slow)])  # 4 cubes: seconds each
@pytest.mark.parametrize(
    "options", [{}, {"schedule": "random", "seed": 3, "sanitize": True}], ids=["lockstep", "random:3+sanitize"]
)
def test_with_and_without_multicast_across_the_cluster(cluster_m, options):
    # 130 rows: three 64-row tiles, so clusters of 2 and 4 along M have a spare cube that writes nothing
    client = cp.client("interp", **options)
    a, b_t = operands(130, 72, 136, np.float16, seed=5)
    config = WgmmaGemmConfig(stages=2, cluster_m=cluster_m, consumers=1, tile_n=64)
    launch = wgmma_gemm_launch(client.create(a), client.create(b_t), client.zeros((130, 72), np.float32), config)
    assert launch.cube_count.cluster_shape() == (1, cluster_m, 1)
    assert launch.cube_count.y == {1: 3, 2: 4, 4: 4}[cluster_m]
    launch.launch(client)
    got = client.read(launch.args[2].handle)
    assert (np.abs(got - reference(a, b_t)) <= bound(a, b_t, np.float32)).all()


@pytest.mark.parametrize(
    ("config", "blocks"),
    [
        (WgmmaGemmConfig(), (2, 2)),  # 128 x 128 blocks, two consumer warpgroups, B multicast to 2 cubes
        # the wider shapes take seconds each on the interp: the slow tier runs them
        pytest.param(WgmmaGemmConfig(consumers=2, tile_n=256, cluster_m=1, stages=2), (1, 2), marks=pytest.mark.slow),
        pytest.param(WgmmaGemmConfig(consumers=1, tile_n=128, cluster_m=4, stages=3), (2, 4), marks=pytest.mark.slow),
    ],
    ids=["default", "128x256", "64x128-cluster4"],
)
def test_block_shapes(config, blocks):
    client = cp.client("interp", sanitize=True, schedule="random", seed=6)
    a, b_t = operands(200, 150, 136, cp.bf16.numpy, seed=7)
    launch = wgmma_gemm_launch(client.create(a), client.create(b_t), client.zeros((200, 150), np.float32), config)
    assert (launch.cube_count.x, launch.cube_count.y) == blocks
    assert launch.cube_dim.x == (config.consumers + 1) * 128
    launch.launch(client)
    got = client.read(launch.args[2].handle)
    assert (np.abs(got - reference(a, b_t)) <= bound(a, b_t, np.float32)).all()


def test_config_is_checked():
    with pytest.raises(ValueError, match="cluster_m must be 1, 2 or 4"):
        WgmmaGemmConfig(cluster_m=3)
    with pytest.raises(ValueError, match="consumers must be 1 or 2"):
        WgmmaGemmConfig(consumers=3)
    with pytest.raises(ValueError, match="tile_n must be 64, 128 or 256"):
        WgmmaGemmConfig(tile_n=96)


@pytest.mark.parametrize("name", ["f16", "bf16"])
def test_any_k_through_zero_padded_copies(client, name):
    a, b_t = operands(70, 40, 45, IN_DTYPES[name], seed=8)  # K = 45: rows of 90 bytes, which TMA cannot read
    got = client.read(wgmma_matmul(client, client.create(a), client.create(b_t)))
    assert (np.abs(got - reference(a, b_t)) <= bound(a, b_t, np.float32)).all()


def test_pad_columns_appends_zero_columns(client):
    from cubepy_layouts.matmul import pad_columns

    matrix = np.arange(3 * 5, dtype=np.float16).reshape(3, 5)
    padded = client.read(pad_columns(client, client.create(matrix), 8))
    expected = np.zeros((3, 8), np.float16)
    expected[:, :5] = matrix
    np.testing.assert_array_equal(padded, expected)


def test_k_must_give_16_byte_rows():
    client = cp.client("interp")
    with pytest.raises(cp.LaunchError, match="K \\(12\\) must be a multiple of 8"):
        wgmma_gemm_launch(
            client.zeros((8, 12), np.float16), client.zeros((8, 12), np.float16), client.zeros((8, 8), np.float32)
        )


def test_ptx_has_wgmma_and_tma_and_assembles_without_spills():
    client = cp.client("interp")
    a, b_t = operands(*SHAPES[1], np.float16)
    compiled = wgmma_gemm_launch(client.create(a), client.create(b_t), client.zeros((100, 72), np.float32)).compile()
    assert "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16" in compiled.ptx  # the default 128 x 128 block
    assert "cp.async.bulk.tensor.2d.shared::cluster.global.tile" in compiled.ptx
    assert ".multicast::cluster" in compiled.ptx  # B is shared by the two cubes of the default cluster
    assert "mbarrier.arrive.release.cluster.shared::cluster.b64" in compiled.ptx
    if compiled.resources is None:
        pytest.skip("ptxas is not available: the PTX was not assembled")
    assert compiled.resources.spill_store_bytes == 0 and compiled.resources.stack_bytes == 0
