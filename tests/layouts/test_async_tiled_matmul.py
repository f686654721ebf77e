"""``cubepy_layouts.matmul.async_tiled_matmul`` (cp.Pipeline + cp.async staging) against numpy, at ragged shapes."""

from __future__ import annotations

import re

import numpy as np
import pytest

import cubepy as cp
from cubepy_layouts.matmul import AsyncTiledConfig, async_tiled_launch, async_tiled_matmul

SMALL = AsyncTiledConfig(16, 16, 8, 2)
SCHEDULES = [("lockstep", None), ("random", 3), ("adversarial", None)]


def _run(client, m: int, n: int, k: int, config: AsyncTiledConfig = SMALL):
    """The kernel's result and numpy's for small integer inputs (every f32 sum is exact)."""
    rng = np.random.default_rng(m * 10000 + n * 100 + k)
    a = rng.integers(-4, 5, (m, k)).astype(np.float32)
    b = rng.integers(-4, 5, (k, n)).astype(np.float32)
    out = async_tiled_matmul(client, client.create(a), client.create(b), config)
    return client.read(out).reshape(m, n), a @ b


@pytest.mark.parametrize("schedule", SCHEDULES, ids=["lockstep", "random3", "adversarial"])
@pytest.mark.parametrize(("m", "n", "k"), [(21, 36, 20), (16, 16, 4), (1, 4, 28)])
def test_matches_numpy_on_interp_under_the_sanitizer(schedule, m, n, k):
    got, expected = _run(cp.client("interp", sanitize=True, schedule=schedule[0], seed=schedule[1]), m, n, k)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("config", [SMALL, AsyncTiledConfig(16, 16, 8, 3), AsyncTiledConfig()], ids=str)
def test_matches_numpy_and_the_interp_on_cpu(config):
    got, expected = _run(cp.client("cpu"), 37, 44, 52, config)
    np.testing.assert_array_equal(got, expected)
    interp, _ = _run(cp.client("interp"), 37, 44, 52, config)
    assert got.tobytes() == interp.tobytes()


@pytest.mark.slow
def test_default_config_three_stages_on_interp_under_the_sanitizer():
    got, expected = _run(cp.client("interp", sanitize=True, schedule="adversarial"), 70, 68, 100, AsyncTiledConfig())
    np.testing.assert_array_equal(got, expected)


@pytest.mark.ptxas
@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_ptx_has_the_cp_async_pipeline_and_assembles(target):
    client = cp.client("interp")
    a, b, out = (client.zeros(shape, np.float32) for shape in ((37, 52), (52, 44), (37, 44)))
    compiled = async_tiled_launch(a, b, out, AsyncTiledConfig()).compile(target)
    ptx = compiled.ptx
    # 2 prologue stages and one in the loop, 2 chunks of a and 2 of b each: 12 16-byte copies, with src-size
    assert len(re.findall(r"cp\.async\.cg\.shared\.global \[%r\d+(?:\+\d+)?\], \[%rd\d+\], 16, %r\d+;", ptx)) == 12
    assert ptx.count("cp.async.commit_group;") == 3
    assert {int(n) for n in re.findall(r"cp\.async\.wait_group\s+(\d+);", ptx)} == {0, 1, 2}  # by the stages in flight
    assert compiled.cubin and compiled.resources.spill_store_bytes == 0


def test_shapes_that_break_the_alignment_rule_are_refused():
    client = cp.client("interp")
    a, b, out = client.zeros((8, 6), np.float32), client.zeros((6, 8), np.float32), client.zeros((8, 8), np.float32)
    with pytest.raises(cp.LaunchError, match="K=6 and N=8 must be multiples of 4"):
        async_tiled_launch(a, b, out)


def test_bad_configs_are_refused():
    with pytest.raises(cp.LaunchError, match="stages=1"):
        AsyncTiledConfig(stages=1)


def test_the_tuned_launcher_times_every_blocking_once_then_reuses_its_choice(tmp_path, monkeypatch):
    from cubepy_layouts.matmul import TUNING_CONFIGS, tuned_async_tiled_matmul

    calls: list[dict] = []
    original = tuned_async_tiled_matmul.fn  # the launcher the autotuner wraps

    def counting(client, a, b, **blocking):
        calls.append(blocking)
        return original(client, a, b, **blocking)

    monkeypatch.setattr(tuned_async_tiled_matmul, "fn", counting)
    with cp.config.override(CUBEPY_CACHE_DIR=str(tmp_path)):
        client = cp.client("cpu")
        rng = np.random.default_rng(5)
        a = rng.integers(-4, 5, (40, 24)).astype(np.float32)
        b = rng.integers(-4, 5, (24, 36)).astype(np.float32)
        ha, hb = client.create(a), client.create(b)
        out = tuned_async_tiled_matmul(client, ha, hb)
        np.testing.assert_array_equal(client.read(out).reshape(40, 36), a @ b)
        tried = {tuple(sorted(c.items())) for c in calls}
        assert tried == {tuple(sorted(c.items())) for c in TUNING_CONFIGS}  # every blocking was timed
        best = tuned_async_tiled_matmul.best(client, ha, hb)
        assert best in TUNING_CONFIGS
        before = len(calls)
        again = tuned_async_tiled_matmul(client, ha, hb)
        assert len(calls) == before + 1 and calls[-1] == best  # no timing: the chosen blocking, once
        np.testing.assert_array_equal(client.read(again).reshape(40, 36), a @ b)
