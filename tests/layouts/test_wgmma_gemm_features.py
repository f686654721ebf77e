"""The wgmma GEMM's CUTLASS-style features against float64 numpy: B as K x N (MN-major descriptors), two wgmma
groups in flight, setmaxnreg, the TMA-store epilogue with bias and activation, the persistent scheduler, fp8
inputs and the autotuned configuration table."""

import math
import re

import ml_dtypes
import numpy as np
import pytest

import cubepy as cp
from cubepy_layouts.matmul import GEMM_CONFIGS, WgmmaGemmConfig, tuned_wgmma_matmul, wgmma_gemm_launch, wgmma_matmul
from cubepy_layouts.matmul.wgmma_gemm import default_num_sms, uses_tma_store

SANITIZED = [{"schedule": "random", "seed": 11, "sanitize": True}, {"schedule": "adversarial", "sanitize": True}]
SANITIZED_IDS = ["random:11+sanitize", "adversarial+sanitize"]
SMALL = WgmmaGemmConfig(stages=2, cluster_m=1, consumers=1, tile_n=64)  # one 64 x 64 block per cube


def operands(m, n, k, dtype=np.float16, seed=0):
    """a (M x K) and b_t (N x K) of small integers or normals, in ``dtype``."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((n, k)).astype(dtype)


def reference(a, b_t):
    return a.astype(np.float64) @ b_t.astype(np.float64).T


def bound(a, b_t):
    """f32 accumulation of exact products: at most K * 2^-23 of the sum of the magnitudes."""
    magnitude = np.abs(a.astype(np.float64)) @ np.abs(b_t.astype(np.float64)).T
    return a.shape[1] * 2.0**-23 * magnitude + 1e-30


def assert_close(got, a, b_t):
    assert (np.abs(got - reference(a, b_t)) <= bound(a, b_t)).all()


# -- B as K x N -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "shape"),
    [
        ("f16", (100, 72, 200)),
        ("bf16", (66, 37, 45)),
        # the other pairs of type and shape repeat the same paths at 3-4 s each: the slow tier runs them
        pytest.param("f16", (70, 40, 48), marks=pytest.mark.slow),
        pytest.param("bf16", (70, 40, 48), marks=pytest.mark.slow),
        pytest.param("bf16", (100, 72, 200), marks=pytest.mark.slow),
        pytest.param("f16", (66, 37, 45), marks=pytest.mark.slow),
    ],
    ids=["f16-100x72x200", "bf16-ragged-N-and-K", "f16-70x40x48", "bf16-70x40x48", "bf16-100x72x200", "f16-ragged"],
)
def test_b_given_k_by_n(client, shape, name):
    a, b_t = operands(*shape, {"f16": np.float16, "bf16": cp.bf16.numpy}[name], seed=1)
    b = np.ascontiguousarray(b_t.T)  # numpy's form: K x N
    got = client.read(wgmma_matmul(client, client.create(a), b=client.create(b)))
    assert got.shape == (shape[0], shape[1])
    assert_close(got, a, b_t)


def test_b_major_keyword_keeps_the_positional_meaning():
    client = cp.client("interp")
    a, b_t = operands(70, 48, 64, seed=2)
    by_rows = client.read(wgmma_matmul(client, client.create(a), client.create(b_t)))  # N x K, as before
    by_cols = client.read(wgmma_matmul(client, client.create(a), client.create(b_t.T.copy()), b_major="kn"))
    assert_close(by_rows, a, b_t)
    np.testing.assert_array_equal(by_rows, by_cols)  # the same products summed in the same order
    with pytest.raises(cp.LaunchError, match="pass B once"):
        wgmma_matmul(client, client.create(a), client.create(b_t), b=client.create(b_t))


@pytest.mark.parametrize(
    ("options", "cluster_m"),
    [
        (SANITIZED[0], 2),
        # the adversarial schedule and the 4-cube cluster take seconds each: the slow tier runs them
        pytest.param(SANITIZED[1], 2, marks=pytest.mark.slow),
        pytest.param(SANITIZED[0], 4, marks=pytest.mark.slow),
        pytest.param(SANITIZED[1], 4, marks=pytest.mark.slow),
    ],
    ids=[f"{cluster}-{name}" for cluster in (2, 4) for name in SANITIZED_IDS],
)
def test_k_by_n_b_multicast_splits_k_rows_across_the_cluster(options, cluster_m):
    client = cp.client("interp", **options)
    # cluster 2: two 64-column blocks of B per stage; cluster 4: 16 k rows per cube and a spare cube along M
    m, n = (70, 136) if cluster_m == 2 else (130, 64)
    a, b_t = operands(m, n, 136, seed=3)
    config = WgmmaGemmConfig(stages=2, cluster_m=cluster_m, consumers=1, tile_n=128 if cluster_m == 2 else 64)
    out = client.zeros((m, n), np.float32)
    launch = wgmma_gemm_launch(client.create(a), client.create(b_t.T.copy()), out, config, b_major="kn")
    launch.launch(client)
    assert_close(client.read(out), a, b_t)


# -- two groups in flight -------------------------------------------------------------------------------
@pytest.mark.parametrize("in_flight", [1, 2])
@pytest.mark.parametrize("options", SANITIZED, ids=SANITIZED_IDS)
def test_one_or_two_groups_in_flight_under_the_sanitizer(options, in_flight):
    # 5 k tiles through 2 stages: each stage is refilled twice while the other's group may still run
    client = cp.client("interp", **options)
    a, b_t = operands(64, 64, 320, seed=4)
    config = WgmmaGemmConfig(stages=2, cluster_m=1, consumers=2, tile_n=64, in_flight=in_flight)
    assert_close(client.read(wgmma_matmul(client, client.create(a), client.create(b_t), config=config)), a, b_t)


# -- epilogue: bias, activation, TMA store or direct ----------------------------------------------------
def gelu(x):
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


@pytest.mark.parametrize(
    ("activation", "n"),
    [
        pytest.param(None, 40, marks=pytest.mark.slow),  # tma-store-gelu takes the same path with more to check
        ("gelu", 40),
        ("relu", 37),  # 37 f32: rows of 148 bytes, which TMA cannot store: the direct store
        pytest.param("relu", 40, marks=pytest.mark.slow),
        pytest.param(None, 37, marks=pytest.mark.slow),
        pytest.param("gelu", 37, marks=pytest.mark.slow),
    ],
    ids=["tma-store", "tma-store-gelu", "direct-store-relu", "tma-store-relu", "direct-store", "direct-store-gelu"],
)
def test_bias_and_activation(client, activation, n):
    a, b_t = operands(70, n, 48, seed=5)
    bias = np.random.default_rng(6).standard_normal(n).astype(np.float32)
    assert uses_tma_store(WgmmaGemmConfig(), n, 4) == (n == 40)
    handle = wgmma_matmul(client, client.create(a), client.create(b_t), bias=client.create(bias), activation=activation)
    pre = reference(a, b_t) + bias
    expected = {None: pre, "relu": np.maximum(pre, 0.0), "gelu": gelu(pre)}[activation]
    # the product's f32 bound, then the bias add, the activation and erf each within a few f32 ulps
    tolerance = bound(a, b_t) + 8 * 2.0**-24 * (np.abs(pre) + np.abs(bias) + 1.0)
    assert (np.abs(client.read(handle) - expected) <= tolerance).all()


def test_half_precision_output_through_the_tma_store():
    client = cp.client("interp", schedule="random", seed=7, sanitize=True)
    a, b_t = operands(70, 40, 48, seed=7)
    handle = wgmma_matmul(client, client.create(a), client.create(b_t), np.float16, config=SMALL)
    got = client.read(handle).astype(np.float64)
    expected = reference(a, b_t)
    assert (np.abs(got - expected) <= bound(a, b_t) + 2.0**-11 * np.abs(expected)).all()


def test_epilogue_choice_is_checked():
    client = cp.client("interp")
    a, b_t = operands(16, 37, 16)
    with pytest.raises(cp.LaunchError, match="not a multiple of 16 bytes"):
        wgmma_gemm_launch(
            client.create(a), client.create(b_t), client.zeros((16, 37), np.float32), WgmmaGemmConfig(epilogue="tma")
        )
    wide = WgmmaGemmConfig(consumers=2, tile_n=256, stages=4, cluster_m=1)  # 192 KiB of stages: no room left
    assert not uses_tma_store(wide, 256, 4)
    with pytest.raises(cp.LaunchError, match="bias must be an f32 handle"):
        wgmma_gemm_launch(
            client.create(a),
            client.create(b_t),
            client.zeros((16, 37), np.float32),
            bias=client.zeros((5,), np.float32),
        )


# -- persistent scheduler --------------------------------------------------------------------------------
@pytest.mark.parametrize("options", [{}, *SANITIZED], ids=["lockstep", *SANITIZED_IDS])
def test_persistent_cubes_walk_every_tile(options):
    client = cp.client("interp", **options)
    a, b_t = operands(200, 150, 136, seed=8)  # 4 x 3 blocks of 64 x 64 (2 x 3 clusters) over 2 clusters
    config = WgmmaGemmConfig(stages=3, cluster_m=2, consumers=1, tile_n=64, persistent=True, num_sms=4, raster_group=2)
    out = client.zeros((200, 150), np.float32)
    launch = wgmma_gemm_launch(client.create(a), client.create(b_t), out, config)
    assert (launch.cube_count.x, launch.cube_count.y) == (4, 1)
    assert launch.cube_count.cluster_shape() == (2, 1, 1)
    launch.launch(client)
    assert_close(client.read(out), a, b_t)


def test_persistent_on_both_runtimes(client):
    a, b_t = operands(150, 136, 72, seed=9)
    config = WgmmaGemmConfig(stages=2, cluster_m=1, consumers=1, tile_n=64, persistent=True, num_sms=3)
    got = client.read(wgmma_matmul(client, client.create(a), b=client.create(b_t.T.copy()), config=config))
    assert_close(got, a, b_t)


def test_persistent_grid_is_the_sms_in_whole_clusters():
    client = cp.client("interp")
    assert default_num_sms(client) == 132  # no cuda device: an H100/H200's count
    a, b_t = operands(1024, 1024, 8)
    out = client.zeros((1024, 1024), np.float32)
    launch = wgmma_gemm_launch(client.create(a), client.create(b_t), out, WgmmaGemmConfig(persistent=True), num_sms=7)
    assert launch.cube_count.x == 6  # 3 clusters of 2: 7 SMs hold no fourth
    launch = wgmma_gemm_launch(client.create(a), client.create(b_t), out, WgmmaGemmConfig(persistent=True))
    assert launch.cube_count.x == 64  # 8 x 8 blocks of 128: fewer tiles than SMs, one cube per tile


# -- fp8 -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2], ids=["e4m3", "e5m2"])
@pytest.mark.parametrize("k", [160, 40], ids=["k160", "k40-padded"])
def test_fp8_inputs(client, dtype, k):
    a, b_t = operands(70, 40, k, dtype, seed=10)
    got = client.read(wgmma_matmul(client, client.create(a), client.create(b_t)))
    assert_close(got, a, b_t)


def test_fp8_needs_k_major_b():
    client = cp.client("interp")
    a, b_t = operands(16, 16, 32, ml_dtypes.float8_e4m3fn)
    with pytest.raises(cp.LaunchError, match="K-major only"):
        wgmma_matmul(client, client.create(a), b=client.create(b_t.T.copy()))


# -- configuration ---------------------------------------------------------------------------------------
def test_config_fields_are_checked():
    with pytest.raises(ValueError, match="in_flight must be 1 or 2"):
        WgmmaGemmConfig(in_flight=3)
    with pytest.raises(ValueError, match="registers must be"):
        WgmmaGemmConfig(registers=(41, 232))
    with pytest.raises(ValueError, match="more than the SM's 65536"):
        WgmmaGemmConfig(registers=(40, 256))
    with pytest.raises(ValueError, match="epilogue must be"):
        WgmmaGemmConfig(epilogue="smem")
    with pytest.raises(ValueError, match="num_sms"):
        WgmmaGemmConfig(num_sms=1)
    for fields in GEMM_CONFIGS:
        WgmmaGemmConfig(**fields)  # every tuning entry is a valid configuration


def test_tuned_launcher_without_timing_takes_the_first_config(monkeypatch):
    calls = []
    original = tuned_wgmma_matmul.fn
    monkeypatch.setattr(
        tuned_wgmma_matmul, "fn", lambda *args, **fields: calls.append(fields) or original(*args, **fields)
    )
    client = cp.client("interp")
    a, b_t = operands(70, 40, 48, seed=12)
    with cp.config.override(CUBEPY_AUTOTUNE=False):
        got = client.read(tuned_wgmma_matmul(client, client.create(a), client.create(b_t)))
    assert calls == [GEMM_CONFIGS[0]]
    assert_close(got, a, b_t)


@pytest.mark.slow  # compiles and times every configuration on the cpu runtime
def test_tuned_launcher_times_every_config_once(tmp_path, monkeypatch):
    calls = []
    original = tuned_wgmma_matmul.fn
    monkeypatch.setattr(
        tuned_wgmma_matmul, "fn", lambda *args, **fields: calls.append(fields) or original(*args, **fields)
    )
    with cp.config.override(CUBEPY_CACHE_DIR=str(tmp_path)):
        client = cp.client("cpu")
        a, b_t = operands(70, 40, 48, seed=13)
        ha, hb = client.create(a), client.create(b_t)
        assert_close(client.read(tuned_wgmma_matmul(client, ha, hb)), a, b_t)
        assert {tuple(sorted(c.items())) for c in calls} == {tuple(sorted(c.items())) for c in GEMM_CONFIGS}
        assert tuned_wgmma_matmul.best(client, ha, hb) in GEMM_CONFIGS


# -- compiled for sm_90a -------------------------------------------------------------------------------
def compiled_form(config=None, dtype=np.float16, **options):
    config = config or WgmmaGemmConfig()
    client = cp.client("interp")
    a, b_t = operands(256, 256, 256, dtype)
    b = b_t.T.copy() if options.get("b_major") == "kn" else b_t
    out = client.zeros((256, 256), np.float32)
    return wgmma_gemm_launch(client.create(a), client.create(b), out, config, **options).compile()


def assert_no_spills(compiled):
    if compiled.resources is None:
        pytest.skip("ptxas is not available: the PTX was not assembled")
    assert compiled.resources.spill_store_bytes == 0 and compiled.resources.stack_bytes == 0


def test_ptx_of_the_default_form():
    compiled = compiled_form()
    ptx = compiled.ptx
    assert re.search(r"setmaxnreg\.dec\.sync\.aligned\.u32\s+40;", ptx)  # the producer gives registers back
    assert re.search(r"setmaxnreg\.inc\.sync\.aligned\.u32\s+232;", ptx)
    assert "wgmma.wait_group.sync.aligned 1" in ptx  # two groups in flight
    assert "cp.async.bulk.tensor.2d.global.shared::cta" in ptx  # the TMA-store epilogue
    assert_no_spills(compiled)
    plain = compiled_form(WgmmaGemmConfig(registers=(0, 0), in_flight=1, epilogue="direct")).ptx
    assert "setmaxnreg" not in plain and "wgmma.wait_group.sync.aligned 1" not in plain
    assert "cp.async.bulk.tensor.2d.global.shared::cta" not in plain


@pytest.mark.slow  # among the suite's heaviest; CI's slow tier runs it
@pytest.mark.parametrize(
    ("config", "dtype", "options", "needle"),
    [
        (WgmmaGemmConfig(), np.float16, {"b_major": "kn"}, "m64n128k16.f32.f16.f16"),
        (WgmmaGemmConfig(persistent=True), np.float16, {"bias": None, "activation": "gelu"}, "m64n128k16"),
        (WgmmaGemmConfig(), ml_dtypes.float8_e4m3fn, {}, "m64n128k32.f32.e4m3.e4m3"),
    ],
    ids=["k-by-n", "persistent-gelu", "e4m3"],
)
def test_other_forms_assemble_without_spills(config, dtype, options, needle):
    compiled = compiled_form(config, dtype, **options)
    assert needle in compiled.ptx
    assert_no_spills(compiled)
