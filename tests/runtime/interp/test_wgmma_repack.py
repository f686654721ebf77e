"""The FlashAttention re-pack: an f32 accumulator S = A @ B^T becomes the f16/bf16 A fragment of P @ V with
no shared-memory round trip (``cp.wgmma_a_from_accumulator``), and V is read MN-major (its rows are K).

Checked against float64 numpy: P is S rounded to f32 (the wgmma's one rounding), then to the 16-bit
type; the fragment each unit holds is compared with the PTX ISA's A table (``tests.wgmma_hand.a_table``).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import cubepy as cp
from cubepy import UNIT_POS, Array, LocalArray, SharedMemory, cube, f32, u64
from tests.wgmma_hand import a_table, d_table, mn_image, mn_layout, swizzled_image

DTYPES = {"f16": (cp.f16, np.float16), "bf16": (cp.bf16, ml_dtypes.bfloat16)}
KERNELS: dict = {}
SEQ, HEAD = 32, 64  # S is 64 x SEQ (K of P @ V), O is 64 x HEAD


def attention_step(name: str):
    """S = Q K^T (64 x SEQ, one wgmma, 32B-swizzled K-major tiles); P = re-packed S; O = P @ V (V MN-major)."""
    if name in KERNELS:
        return KERNELS[name]
    elem = DTYPES[name][0]
    v_lbo, v_sbo, v_step = mn_layout(HEAD, "128B")

    @cube(launch=True)
    def step(q_img: Array[elem], k_img: Array[elem], v_img: Array[elem], p_out: Array[elem], o_out: Array[f32]):
        q_tile = SharedMemory[elem](64 * 16, alignment=1024)
        k_tile = SharedMemory[elem](SEQ * 16, alignment=1024)
        v_tile = SharedMemory[elem](SEQ * HEAD, alignment=1024)
        for i in range(UNIT_POS, 64 * 16, 128):
            q_tile[i] = q_img[i]
        for i in range(UNIT_POS, SEQ * 16, 128):
            k_tile[i] = k_img[i]
        for i in range(UNIT_POS, SEQ * HEAD, 128):
            v_tile[i] = v_img[i]
        cp.sync_cube()
        s = LocalArray[f32](SEQ // 2)
        cp.wgmma_fence()
        q_desc = cp.wgmma_descriptor(q_tile, 16, 256, "32B")
        k_desc = cp.wgmma_descriptor(k_tile, 16, 256, "32B")
        cp.wgmma_mma_async(s, q_desc, k_desc, shape=(64, SEQ, 16), elem=elem, scale_d=False)
        cp.wgmma_commit_group()
        cp.wgmma_wait_group(0)
        o = LocalArray[f32](HEAD // 2)
        v_desc = cp.wgmma_descriptor(v_tile, v_lbo, v_sbo, "128B")
        for kstep in cp.unroll(range(SEQ // 16)):
            p = cp.wgmma_a_from_accumulator(s, kstep, elem)
            for i in cp.unroll(range(8)):
                p_out[(kstep * 128 + UNIT_POS) * 8 + i] = p[i]
            cp.wgmma_fence()
            cp.wgmma_mma_async(
                o,
                p,
                v_desc + u64(kstep * v_step // 16),
                shape=(64, HEAD, 16),
                elem=elem,
                scale_d=kstep > 0,
                major_b="MN",
            )
        cp.wgmma_commit_group()
        cp.wgmma_wait_group(0)
        for i in cp.unroll(range(HEAD // 2)):
            o_out[UNIT_POS * (HEAD // 2) + i] = o[i]

    KERNELS[name] = step
    return step


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
@pytest.mark.parametrize("name", ["f16", "bf16"])
def test_p_from_the_accumulator_feeds_p_at_v(runtime, name):
    client = cp.client(runtime, sanitize=True) if runtime == "interp" else cp.client(runtime)
    dtype = DTYPES[name][1]
    rng = np.random.default_rng(7)
    q = rng.standard_normal((64, 16)).astype(dtype)
    k = rng.standard_normal((SEQ, 16)).astype(dtype)
    v = rng.standard_normal((SEQ, HEAD)).astype(dtype)  # K x N as a numpy user holds it: N contiguous
    p_out = client.zeros((SEQ // 16 * 128 * 8,), dtype)
    o_out = client.zeros((128 * HEAD // 2,), np.float32)
    images = [swizzled_image(q, "32B"), swizzled_image(k, "32B"), mn_image(np.ascontiguousarray(v.T), "128B")]
    attention_step(name).launch(
        client,
        cp.CubeCount(1),
        cp.CubeDim(128),
        *(cp.ArrayArg(client.create(image.view(dtype))) for image in images),
        cp.ArrayArg(p_out),
        cp.ArrayArg(o_out),
    )
    s = q.astype(np.float64) @ k.astype(np.float64).T
    p = s.astype(np.float32).astype(dtype)
    raw_p = client.read(p_out)
    got_p = np.zeros((64, SEQ), dtype)
    for kstep in range(SEQ // 16):
        for (unit, i), (r, kk) in a_table(2).items():
            got_p[r, 16 * kstep + kk] = raw_p[(kstep * 128 + unit) * 8 + i]
    np.testing.assert_array_equal(got_p.astype(np.float32), p.astype(np.float32))
    raw_o = client.read(o_out)
    got_o = np.zeros((64, HEAD), np.float32)
    for (unit, i), (r, col) in d_table(HEAD).items():
        got_o[r, col] = raw_o[unit * (HEAD // 2) + i]
    wide_p, wide_v = p.astype(np.float64), v.astype(np.float64)
    bound = (SEQ // 16) * 2.0**-23 * (np.abs(wide_p) @ np.abs(wide_v)) + 1e-30
    assert (np.abs(got_o - wide_p @ wide_v) <= bound).all()


@pytest.mark.ptxas
def test_the_attention_step_assembles_for_sm_90a():
    elem = cp.f16
    compiled = attention_step("f16").compile(
        cp.CubeDim(128),
        *(cp.BufferCompilationArg(elem, 1) for _ in range(4)),
        cp.BufferCompilationArg(f32, 1),
        target="sm_90a",
    )
    lines = [line for line in compiled.ptx.splitlines() if "wgmma.mma_async" in line]
    assert len(lines) == 1 + SEQ // 16
    assert all(line.rstrip().endswith("p, 1, 1, 1;") for line in lines[1:])  # register A, B MN-major
    assert compiled.cubin
    assert compiled.resources.spill_store_bytes == 0


def test_a_step_past_the_accumulator_is_refused_with_the_kernel_line():
    @cube(launch=True)
    def bad(out: Array[f32]):
        s = LocalArray[f32](16)
        for i in cp.unroll(range(16)):
            s[i] = f32(i)
        p = cp.wgmma_a_from_accumulator(s, 2, cp.f16)
        out[0] = f32(p[0])

    client = cp.client("interp")
    with pytest.raises(cp.CubeError, match=r"step must be a comptime integer 0\.\.1") as info:
        bad.launch(client, cp.CubeCount(1), cp.CubeDim(128), cp.ArrayArg(client.zeros((1,), np.float32)))
    assert "test_wgmma_repack.py:" in str(info.value)


def test_an_fp8_re_pack_is_refused():
    @cube(launch=True)
    def bad(out: Array[f32]):
        s = LocalArray[f32](16)
        p = cp.wgmma_a_from_accumulator(s, 0, cp.e4m3)
        out[0] = f32(p[0])

    client = cp.client("interp")
    with pytest.raises(cp.CubeError, match="elem must be cp.f16 or cp.bf16"):
        bad.launch(client, cp.CubeCount(1), cp.CubeDim(128), cp.ArrayArg(client.zeros((1,), np.float32)))
