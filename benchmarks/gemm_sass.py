"""``python -m benchmarks.gemm_sass``: the wgmma GEMM's hot loop beside Triton's compiled matmul, for sm_90a.

cubepy's side is ``cubepy_layouts.matmul.wgmma_gemm_launch`` (bf16 in, f32 out, TMA 128B-swizzled stages):
its default 128 x 128 x 64 block (two consumer warpgroups, B multicast across a cluster of two cubes along
M, two wgmma groups in flight, setmaxnreg, TMA-store epilogue), the same without those three features (the
kernel before them), with B given K x N, persistent with a gelu epilogue, with e4m3 inputs, and the small
64 x 64 x 64 form with and without multicast.  Triton's side is the same algorithm
written with Triton's TMA tensor descriptors and ``warp_specialize=True``, compiled with
``triton.compile(..., target=GPUTarget("cuda", 90, 32))`` for the same block shapes, and, for reference,
Triton's tutorial matmul (pointer loads).  One more row is ``examples/persistent_wgmma.py``, a persistent GEMM in
the style of Gluon's tutorials (a rolled k loop, its stage a run-time counter).  Both cubins are read with
``cuobjdump``: registers, shared memory, spills, SASS instructions (no NOPs) and, for the loop that issues
the ``HGMMA`` instructions, its length and its ``HGMMA`` count per K step of 64.  Static counts only: no
GPU is needed, nothing is timed.  Needs Triton and ``cuobjdump`` (the ``bench`` extra); without them it
says why and exits 0.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import attrs
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.sass import find_cuda_tool, loop_bodies, sass_of  # noqa: E402

K_STEP = 64
# Every consumer warpgroup of these kernels multiplies its own 64 rows of the block: its loop's HGMMAs (each
# 64 x N x 16) cover a 64 x N tile, whatever the block's M; the counts are per consumer warpgroup.
WARPGROUP_M = 64


def _sass_text(cubin: bytes, entry: str, cuobjdump: str) -> str:
    with tempfile.TemporaryDirectory(prefix="cubepy-gemm-sass-") as tmp:
        path = Path(tmp) / "k.cubin"
        path.write_bytes(cubin)
        return subprocess.run(
            [cuobjdump, "-sass", "-fun", entry, str(path)], capture_output=True, text=True, check=True
        ).stdout


_HGMMA = re.compile(r"^[HQ]GMMA\.(\d+)x(\d+)x(\d+)")  # QGMMA: fp8 inputs


def describe(cubin: bytes, entry: str, tile: tuple[int, int], cuobjdump: str) -> dict:
    """Resources, SASS size and the HGMMA loop of ``entry``, per K step of ``K_STEP`` of the ``tile`` (M, N) one
    warpgroup's loop computes.

    One trip of the loop may cover several K steps (ptxas unrolls, or a stage loop is unrolled in the
    kernel): the K a trip covers is the multiply volume of its HGMMAs over the tile's M x N."""
    usage = sass_of(cubin, entry, cuobjdump)
    _, loops = loop_bodies(_sass_text(cubin, entry, cuobjdump))
    shapes = [[tuple(map(int, m.groups())) for t in body if (m := _HGMMA.match(t))] for body in loops]
    with_mma = [(body, found) for body, found in zip(loops, shapes) if found]
    hot, found = min(with_mma, key=lambda pair: len(pair[0])) if with_mma else ([], [])  # innermost
    k_per_trip = sum(m * n * k for m, n, k in found) / (tile[0] * tile[1]) if found else K_STEP
    scale = K_STEP / k_per_trip
    return {
        "k_per_trip": k_per_trip,
        "registers": usage.registers,
        "shared": usage.shared,
        "spills": usage.local + usage.stack,
        "sass": usage.instructions,
        "hot_loop": len(hot),
        "hgmma_per_k_step": sum(bool(_HGMMA.match(text)) for text in hot) * scale,
        "sass_per_k_step": len(hot) * scale,
    }


def cubepy_gemm(cuobjdump: str, config, dtype=None, **options) -> dict:
    """The warp-specialized wgmma GEMM (bf16 -> f32 unless ``dtype``) with ``config``, compiled for sm_90a;
    ``options`` go to ``wgmma_gemm_launch`` (``b_major``, ``activation``)."""
    import cubepy as cp
    from cubepy_layouts.matmul import wgmma_gemm_launch

    client = cp.client("interp")
    dtype = dtype or cp.bf16.numpy
    a = client.create(np.zeros((256, 256), dtype=dtype))
    b_t = client.create(np.zeros((256, 256), dtype=dtype))
    out = client.zeros((256, 256), np.float32)
    compiled = wgmma_gemm_launch(a, b_t, out, config, **options).compile()
    if compiled.cubin is None:
        raise RuntimeError(f"ptxas did not assemble the GEMM: {compiled.ptxas_status}")
    result = describe(compiled.cubin, compiled.name, (WARPGROUP_M, config.tile_n), cuobjdump)
    result["shared"] += compiled.dynamic_shared_bytes  # the stages, when they are one dynamic array
    return result


def persistent_example(cuobjdump: str, stages: int) -> dict:
    """``examples/persistent_wgmma.py`` (Gluon's persistent style: one warpgroup, a rolled k loop whose stage is
    a run-time counter), f16 in, f32 out, 64 x 128 tiles."""
    import cubepy as cp
    from examples import persistent_wgmma as example

    client = cp.client("interp")
    maps = [
        cp.TensorMapArg.tiled(cp.TensorArg(client.zeros((256, 256), np.float16)), box, swizzle="128B")
        for box in ((example.TILE_M, example.TILE_K), (example.TILE_N, example.TILE_K))
    ]
    out = cp.ArrayArg(client.zeros((256 * 256,), np.float32))
    sizes = [cp.ScalarArg(256, cp.u32)] * 3
    compiled = example.persistent_gemm.compile(cp.CubeDim(example.WARPGROUP), *maps, out, *sizes, stages)
    result = describe(compiled.cubin, compiled.name, (WARPGROUP_M, example.TILE_N), cuobjdump)
    result["shared"] += compiled.dynamic_shared_bytes
    return result


def triton_gemm(block_m: int, block_n: int, block_k: int, cuobjdump: str) -> dict:
    """Triton's tutorial matmul (bf16 in and out) compiled for sm_90 with the given tile."""
    import triton
    from triton.compiler import ASTSource

    from benchmarks.compile_bench import _triton_kernels, triton_compile

    signature = {
        name: "i32" for name in ("M", "N", "K", *(f"stride_{s}" for s in ("am", "ak", "bk", "bn", "cm", "cn")))
    }
    signature = {"a_ptr": "*bf16", "b_ptr": "*bf16", "c_ptr": "*bf16", **signature}
    constexprs = {"BLOCK_SIZE_M": block_m, "BLOCK_SIZE_N": block_n, "BLOCK_SIZE_K": block_k, "GROUP_SIZE_M": 8}
    signature.update(dict.fromkeys(constexprs, "constexpr"))
    divisible = (0, 1, 2, 3, 4, 5, 6, 8, 10)  # as the JIT infers for aligned tensors and sizes
    src = ASTSource(
        fn=_triton_kernels()["matmul"],
        signature=signature,
        constexprs=constexprs,
        attrs={(i,): [["tt.divisibility", 16]] for i in divisible},
    )
    compiled = triton_compile(src, {"num_warps": 4, "num_stages": 3})
    result = describe(
        compiled.asm["cubin"], compiled.metadata.name, (block_m, block_n), cuobjdump
    )  # 4 warps: one warpgroup does the block
    result["shared"] = compiled.metadata.shared
    result["version"] = triton.__version__
    return result


def _triton_tma_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def matmul_tma(a_desc, b_desc, c_desc, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):  # noqa: N803
        """c = a @ b_t.T over TMA descriptors, B given N x K as cubepy's GEMM takes it."""
        offs_m = tl.program_id(0) * BLOCK_M
        offs_n = tl.program_id(1) * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in tl.range(0, tl.cdiv(K, BLOCK_K), warp_specialize=True):  # stages: the num_stages option
            a = a_desc.load([offs_m, k * BLOCK_K])
            b = b_desc.load([offs_n, k * BLOCK_K])
            acc = tl.dot(a, b.T, acc)
        c_desc.store([offs_m, offs_n], acc)

    return matmul_tma


def triton_tma_gemm(cuobjdump: str, block_m: int, block_n: int, stages: int) -> dict:
    """The same algorithm in Triton: TMA descriptors, warp specialization, ``block_m x block_n x 64``, bf16 -> f32."""
    import triton
    from triton.compiler import ASTSource

    from benchmarks.compile_bench import triton_compile

    signature = {
        "a_desc": f"tensordesc<bf16[{block_m}, 64]>",
        "b_desc": f"tensordesc<bf16[{block_n}, 64]>",
        "c_desc": f"tensordesc<fp32[{block_m}, {block_n}]>",
        "K": "i32",
        **dict.fromkeys(("BLOCK_M", "BLOCK_N", "BLOCK_K"), "constexpr"),
    }
    constexprs = {"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": 64}
    src = ASTSource(fn=_triton_tma_kernel(), signature=signature, constexprs=constexprs)
    compiled = triton_compile(src, {"num_warps": 4 * (block_m // 64), "num_stages": stages})
    result = describe(compiled.asm["cubin"], compiled.metadata.name, (WARPGROUP_M, block_n), cuobjdump)
    result["shared"] = compiled.metadata.shared  # Triton's shared memory is dynamic: cuobjdump shows none
    result["version"] = triton.__version__
    return result


def missing() -> str | None:
    """Why the comparison cannot run here, or None."""
    if find_cuda_tool("cuobjdump") is None:
        return "cuobjdump not found: pip install nvidia-cuda-cuobjdump (the bench extra)"
    try:
        import triton  # noqa: F401
    except ImportError:
        return "Triton is not installed: pip install triton (the bench extra)"
    return None


def main(argv: list[str] | None = None) -> int:
    """Print the table (and write ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)
    reason = missing()
    if reason is not None:
        print(f"skipped: {reason}")
        return 0
    cuobjdump = find_cuda_tool("cuobjdump")
    assert cuobjdump is not None
    import ml_dtypes

    from cubepy_layouts.matmul import WgmmaGemmConfig

    small = WgmmaGemmConfig(consumers=1, tile_n=64, stages=3)
    # the kernel as it was before two groups in flight, setmaxnreg and the TMA-store epilogue
    before = WgmmaGemmConfig(in_flight=1, registers=(0, 0), epilogue="direct")
    rows = {
        "cubepy wgmma_gemm 128x128x64, 2 consumer warpgroups, B multicast to 2 cubes (default)": cubepy_gemm(
            cuobjdump, WgmmaGemmConfig()
        ),
        "cubepy default without its new features (1 group in flight, no setmaxnreg, direct store)": cubepy_gemm(
            cuobjdump, before
        ),
        "cubepy default, B given K x N (MN-major descriptors)": cubepy_gemm(cuobjdump, WgmmaGemmConfig(), b_major="kn"),
        "cubepy default, persistent (132 SMs), gelu epilogue": cubepy_gemm(
            cuobjdump, WgmmaGemmConfig(persistent=True), activation="gelu"
        ),
        "cubepy default, e4m3 inputs (a stage is 128 of K: per K step of 64 halves)": cubepy_gemm(
            cuobjdump, WgmmaGemmConfig(), ml_dtypes.float8_e4m3fn
        ),
        "Triton, TMA descriptors + warp_specialize, 128x128x64, 8 warps, 4 stages": triton_tma_gemm(
            cuobjdump, 128, 128, 4
        ),
        "cubepy wgmma_gemm 64x64x64, B multicast to 2 cubes": cubepy_gemm(cuobjdump, small),
        "cubepy wgmma_gemm 64x64x64, no cluster": cubepy_gemm(cuobjdump, attrs.evolve(small, cluster_m=1)),
        "Triton, TMA descriptors + warp_specialize, 64x64x64, 4 warps, 3 stages": triton_tma_gemm(cuobjdump, 64, 64, 3),
        "cubepy examples/persistent_wgmma.py 64x128x64 (f16), 3 stages, run-time stage (barrier arrays)": (
            persistent_example(cuobjdump, 3)
        ),
        "Triton tutorial matmul (pointer loads), 64x64x64 (bf16)": triton_gemm(64, 64, 64, cuobjdump),
        "Triton tutorial matmul (pointer loads), 128x128x64 (bf16)": triton_gemm(128, 128, 64, cuobjdump),
    }
    print(
        "| kernel | registers | shared | spills | SASS | HGMMA loop (K per trip) | SASS per K step of 64 "
        "| HGMMA per K step |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, r in rows.items():
        print(
            f"| {name} | {r['registers']} | {r['shared']} | {r['spills']} | {r['sass']} | {r['hot_loop']} "
            f"({r['k_per_trip']:g}) | "
            f"{r['sass_per_k_step']:g} | {r['hgmma_per_k_step']:g} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
