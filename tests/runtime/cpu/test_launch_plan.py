"""What the cpu runtime works out once per compiled kernel: the bound on a unit's steps that decides whether a
launch is routed for Ctrl-C (a loop, a coroutine's wait or an emulated instruction means no bound)."""

from __future__ import annotations

import attrs

import cubepy as cp
from cubepy import Array, cube, f32, u32
from cubepy.runtime.cpu.backend import CpuBackend, _unit_steps


@cube(launch=True)
def straight(x: Array[f32], out: Array[f32]):
    i = cp.ABSOLUTE_POS
    if i < out.len():
        out[i] = x[i] * 2.0 + 1.0


@cube(launch=True)
def looping(x: Array[f32], out: Array[f32], n: u32):
    acc = f32(0.0)
    for k in range(n):
        acc += x[k]
    out[cp.ABSOLUTE_POS] = acc


@cube(launch=True)
def waiting(x: Array[f32], out: Array[f32]):
    tile = cp.SharedMemory[f32](32)
    tile[cp.UNIT_POS] = x[cp.UNIT_POS]
    cp.sync_cube()
    out[cp.UNIT_POS] = tile[31 - cp.UNIT_POS]


def _host(kernel, *args):
    definition = kernel.compile(cp.CubeDim(32), *args, target="sm_90a").definition
    return CpuBackend().prepare(definition)


def test_a_loop_free_kernel_has_a_bound_and_a_loop_or_a_coroutine_has_none():
    f32_arg = Array[f32].default_compilation_arg()
    steps = _unit_steps(_host(straight, f32_arg, f32_arg))
    assert steps is not None and 0 < steps < 100
    assert _unit_steps(_host(looping, f32_arg, f32_arg, 8)) is None
    # a barrier in uniform control runs as two loops over the units (loop fission): bounded
    fissioned = _host(waiting, f32_arg, f32_arg)
    assert fissioned.shape == "unit loops" and _unit_steps(fissioned) is not None
    # units that suspend may wait for ever (a deadlock the runtime reports, or a spin on memory): no bound
    assert _unit_steps(attrs.evolve(fissioned, coroutine=True)) is None
