"""``examples/persistent_wgmma.py``: a rolled k loop with a run-time stage, under every schedule, and its PTX."""

from __future__ import annotations

import re

import numpy as np
import pytest

import cubepy as cp
from examples import persistent_wgmma as example


@pytest.mark.parametrize("options", [{"schedule": "random", "seed": 5}, {"schedule": "adversarial"}])
def test_correct_under_schedules_with_the_sanitizer(options):
    errors = example.run(cp.client("interp", sanitize=True, **options), m=100, n=130, k=136)
    assert all(error < 1e-3 for error in errors.values()), errors


def _compiled():
    client = cp.client("interp")
    a, b_t = np.zeros((128, 128), np.float16), np.zeros((128, 128), np.float16)
    maps = [
        cp.TensorMapArg.tiled(cp.TensorArg(client.create(x)), box, swizzle="128B")
        for x, box in ((a, (64, 64)), (b_t, (128, 64)))
    ]
    sizes = [cp.ScalarArg(128, cp.u32)] * 3
    out = cp.ArrayArg(client.zeros((128 * 128,), np.float32))
    return example.persistent_gemm.compile(cp.CubeDim(128), *maps, out, *sizes, 3, target="sm_90a")


def test_one_stage_per_trip_named_at_run_time():
    ptx = _compiled().ptx
    assert ptx.count("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16") == 4  # the k loop is not unrolled
    waits = re.findall(r"mbarrier\.try_wait\.parity\.shared\.b64 %p\d+, \[([^\]]+)\]", ptx)
    assert waits and all(re.fullmatch(r"%r\d+", address) for address in waits), waits


@pytest.mark.ptxas
def test_ptxas_assembles_it_without_spills_or_serialized_wgmmas():
    compiled = _compiled()
    assert compiled.cubin, compiled.ptxas_status
    resources = compiled.resources
    assert resources.spill_store_bytes == 0 and resources.spill_load_bytes == 0
    assert not compiled.performance_notes, compiled.performance_notes
