"""Warp-specialization building blocks lower to the PTX the ISA names, and ptxas accepts it for sm_90a.

The expected PTX is written as ``# CHECK`` comments in each kernel, matched by ``filecheck``.
"""

from __future__ import annotations

import attrs
import numpy as np
import pytest

import cubepy as cp
from cubepy import PLANE_POS, UNIT_POS, Array, f32, u32
from cubepy.compiler import ptxas as ptxas_tool
from tests.filecheck import filecheck


@cp.cube(launch=True)
def producer_and_consumers(out: Array[f32], consumers: u32):
    # ptxas honours setmaxnreg only when it knows the registers at entry: the exact unit count and a minimum
    # of one cube per SM
    # CHECK: .reqntid 128, 1, 1
    # CHECK-NEXT: .minnctapersm 1
    # CHECK: setmaxnreg.dec.sync.aligned.u32 40;
    # CHECK: bar.arrive 1, 128;
    # CHECK: setmaxnreg.inc.sync.aligned.u32 232;
    # CHECK: bar.sync 1, 128;
    # CHECK: bar.sync 2, {{%r[0-9]+}};
    if PLANE_POS == 0:
        cp.setmaxnreg(40, False)
        cp.named_barrier_arrive(1, 128)
    else:
        cp.setmaxnreg(232, True)
        cp.named_barrier_sync(1, 128)
    cp.named_barrier_sync(2, consumers)
    out[UNIT_POS] = f32(1)


@cp.cube(launch=True)
def spin_on_parity(out: Array[f32], parity: u32):
    # no setmaxnreg, no occupancy hint
    # CHECK-NOT: .minnctapersm
    # CHECK: mbarrier.init.shared.b64
    # CHECK: bar.sync 0;
    # CHECK: [[LOOP:\$L__BB[0-9_]+]]:
    # CHECK: mbarrier.try_wait.parity.shared.b64 {{%p[0-9]+}}, [barrier0], {{%r[0-9]+}};
    # CHECK: bra [[LOOP]];
    bar = cp.Barrier.shared(1, UNIT_POS == 0)
    while not bar.try_wait_parity(parity):
        pass
    out[UNIT_POS] = f32(1)


@cp.cube(launch=True)
def elect_and_fence(out: Array[f32]):
    # CHECK: elect.sync {{%r[0-9]+}}|{{%p[0-9]+}}, -1;
    # CHECK: fence.proxy.async.shared::cta;
    # CHECK: fence.proxy.async.shared::cta;
    if cp.plane_elect():
        out[PLANE_POS] = f32(1)
    cp.fence_proxy_async()
    cp.sync_async_proxy_shared()


@pytest.mark.ptxas
@pytest.mark.parametrize(
    ("kernel", "scalars"),
    [
        (producer_and_consumers, (cp.ScalarArg(128, u32),)),
        (spin_on_parity, (cp.ScalarArg(0, u32),)),
        (elect_and_fence, ()),
    ],
    ids=["named-barriers-setmaxnreg", "try-wait-parity", "elect-fence"],
)
def test_ptx_forms_and_ptxas(kernel, scalars, tmp_path):
    client = cp.client("interp")
    compiled = kernel.compile(cp.CubeDim(128), cp.ArrayArg(client.zeros(128, f32)), *scalars)
    assert compiled.cubin  # ptxas assembled it for sm_90a
    filecheck(kernel, compiled.ptx, tmp_path)


@pytest.mark.ptxas
def test_without_the_occupancy_hint_ptxas_drops_setmaxnreg_and_says_so():
    # the same PTX less its .minnctapersm line: ptxas cannot tell the registers at entry, ignores every
    # setmaxnreg and reports it as a "Potential Performance Loss" (C7508), which performance_notes surfaces
    client = cp.client("interp")
    compiled = producer_and_consumers.compile(
        cp.CubeDim(128), cp.ArrayArg(client.zeros(128, f32)), cp.ScalarArg(128, u32)
    )
    assert compiled.performance_notes == ()
    stripped = compiled.ptx.replace(".minnctapersm 1\n", "")
    assert stripped != compiled.ptx
    _, _, log = ptxas_tool.assemble_with_log(stripped, "sm_90a", compiled.name)
    notes = attrs.evolve(compiled, ptxas_log=log).performance_notes
    assert len(notes) == 1 and "C7508" in notes[0] and "'setmaxnreg' ignored" in notes[0], notes


def test_the_same_kernel_runs_on_the_cpu_runtime_and_the_interp():
    for runtime in ("cpu", "interp"):
        client = cp.client(runtime)
        out = client.zeros((128,), np.float32)
        producer_and_consumers.launch(client, 2, 128, cp.ArrayArg(out), cp.ScalarArg(128, u32))
        assert client.read(out).tolist() == [1.0] * 128, runtime
