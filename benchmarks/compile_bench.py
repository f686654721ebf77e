"""Cold compile time of cubepy kernels against Triton compiling equivalent kernels, in one run.

cubepy: each sample expands a fresh kernel definition (``kernel.define`` with expand + verify) and
compiles it with ``compile_definition(defn, "sm_90a")`` down to a cubin (ptxas); the per-stage
``timings`` are reported as medians. Triton: each sample compiles the tutorial kernel with
``triton.compile(ASTSource(...), target=GPUTarget("cuda", 90, 32))`` into a fresh, empty
``TRITON_CACHE_DIR`` (no GPU needed). The first compile in a process pays one-time setup (llvmlite's
load for cubepy, Triton's own backend/MLIR setup), so it is reported apart from the warm-process
median of the following ``--repeats`` samples.

Run: ``python -m benchmarks.compile_bench [--repeats 5] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cubepy.cli import default_compilation_args  # noqa: E402
from cubepy.compiler.compiled import compile_definition  # noqa: E402
from examples import matmul_tiled, reduce_sum, softmax, vector_add  # noqa: E402

TARGET = "sm_90a"
KERNELS = ("vector_add", "matmul", "softmax")
CUBEPY_CASES = {
    "vector_add": (vector_add.vector_add, {}, (256, 1, 1)),
    "matmul": (matmul_tiled.matmul, {"tile": 16}, (16, 16, 1)),
    "softmax": (softmax.softmax_rows, {}, (32, 1, 1)),
    "plane_sum": (reduce_sum.plane_sum_kernel, {}, (256, 1, 1)),
}


def cubepy_cases() -> dict:
    """Every cubepy compile case: the three above, the plane reduction and, when it exists, the TMA example."""
    cases = dict(CUBEPY_CASES)
    try:
        from examples import tma_roundtrip
    except ImportError:
        return cases
    kernel = next((v for v in vars(tma_roundtrip).values() if type(v).__name__ == "Kernel"), None)
    if kernel is not None:
        comptime = {"rows": getattr(tma_roundtrip, "ROWS", 16), "cols": getattr(tma_roundtrip, "COLS", 32)}
        cases["tma_roundtrip"] = (kernel, comptime, (128, 1, 1))
    return cases


# ----------------------------------------------------------------------------------------------- cubepy


def _cubepy_sample(name: str) -> dict:
    """One cold compile: a fresh definition, then the full pipeline to a cubin. Seconds per stage."""
    kernel, comptime, cube_dim = cubepy_cases()[name]
    comp = tuple(default_compilation_args(kernel, dict(comptime)))
    start = time.perf_counter()
    definition = kernel.define(comp, cube_dim, True)
    expanded = time.perf_counter()
    compiled = compile_definition(definition, TARGET)
    end = time.perf_counter()
    stages = {"expand": expanded - start, **compiled.timings, "total": end - start}
    return {"stages": stages, "cubin": compiled.cubin is not None, "ptxas_status": compiled.ptxas_status}


def bench_cubepy(repeats: int) -> dict:
    """The first compile in the process, then ``repeats`` warm-process samples per kernel."""
    out: dict = {}
    first_name = KERNELS[0]
    first = _cubepy_sample(first_name)
    out["first_in_process"] = {"kernel": first_name, "total_s": first["stages"]["total"], "stages": first["stages"]}
    for name in KERNELS:
        samples = [_cubepy_sample(name) for _ in range(repeats)]
        keys = list(samples[0]["stages"])
        out[name] = {
            "median_stages_s": {k: statistics.median(s["stages"].get(k, 0.0) for s in samples) for k in keys},
            "total_samples_s": [s["stages"]["total"] for s in samples],
            "median_s": statistics.median(s["stages"]["total"] for s in samples),
            "cubin": samples[0]["cubin"],
            "ptxas_status": samples[0]["ptxas_status"],
        }
    return out


# ----------------------------------------------------------------------------------------------- Triton


def _triton_kernels():
    """The Triton tutorial kernels (vector add, matmul, fused softmax), or raise ImportError."""
    import triton
    import triton.language as tl

    @triton.jit
    def add_kernel(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr):  # noqa: N803
        pid = tl.program_id(axis=0)
        offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        mask = offsets < n_elements
        x = tl.load(x_ptr + offsets, mask=mask)
        y = tl.load(y_ptr + offsets, mask=mask)
        tl.store(output_ptr + offsets, x + y, mask=mask)

    @triton.jit
    def matmul_kernel(
        a_ptr,
        b_ptr,
        c_ptr,
        M,
        N,
        K,  # noqa: N803
        stride_am,
        stride_ak,
        stride_bk,
        stride_bn,
        stride_cm,
        stride_cn,
        BLOCK_SIZE_M: tl.constexpr,
        BLOCK_SIZE_N: tl.constexpr,  # noqa: N803
        BLOCK_SIZE_K: tl.constexpr,
        GROUP_SIZE_M: tl.constexpr,
    ):  # noqa: N803
        pid = tl.program_id(axis=0)
        num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
        num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
        num_pid_in_group = GROUP_SIZE_M * num_pid_n
        group_id = pid // num_pid_in_group
        first_pid_m = group_id * GROUP_SIZE_M
        group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
        pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
        pid_n = (pid % num_pid_in_group) // group_size_m
        offs_am = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)) % M
        offs_bn = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
        offs_k = tl.arange(0, BLOCK_SIZE_K)
        a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
        b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
        accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
            a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_SIZE_K, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_SIZE_K, other=0.0)
            accumulator = tl.dot(a, b, accumulator)
            a_ptrs += BLOCK_SIZE_K * stride_ak
            b_ptrs += BLOCK_SIZE_K * stride_bk
        c = accumulator.to(c_ptr.dtype.element_ty)
        offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
        offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
        c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
        c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
        tl.store(c_ptrs, c, mask=c_mask)

    @triton.jit
    def softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_cols, BLOCK_SIZE: tl.constexpr):  # noqa: N803
        row_idx = tl.program_id(0)
        row_start_ptr = input_ptr + row_idx * input_row_stride
        col_offsets = tl.arange(0, BLOCK_SIZE)
        mask = col_offsets < n_cols
        row = tl.load(row_start_ptr + col_offsets, mask=mask, other=-float("inf"))
        row_minus_max = row - tl.max(row, axis=0)
        numerator = tl.exp(row_minus_max)
        denominator = tl.sum(numerator, axis=0)
        softmax_output = numerator / denominator
        output_row_start_ptr = output_ptr + row_idx * output_row_stride
        tl.store(output_row_start_ptr + col_offsets, softmax_output, mask=mask)

    @triton.jit
    def plane_sum_kernel(data_ptr, partial_ptr, n, BLOCK: tl.constexpr, PLANE: tl.constexpr):  # noqa: N803
        pid = tl.program_id(0)
        offsets = pid * BLOCK + tl.arange(0, BLOCK)
        values = tl.load(data_ptr + offsets, mask=offsets < n, other=0.0)
        sums = tl.sum(tl.reshape(values, (BLOCK // PLANE, PLANE)), axis=1)
        tl.store(partial_ptr + pid * (BLOCK // PLANE) + tl.arange(0, BLOCK // PLANE), sums)

    @triton.jit
    def tma_roundtrip_kernel(src_ptr, dst_ptr, M, N, scale, ROWS: tl.constexpr, COLS: tl.constexpr):  # noqa: N803
        # Device-side tensor descriptors (TMA on sm_90): load a tile, dst = scale * src + 1, store it.
        src = tl.make_tensor_descriptor(src_ptr, shape=[M, N], strides=[N, 1], block_shape=[ROWS, COLS])
        dst = tl.make_tensor_descriptor(dst_ptr, shape=[M, N], strides=[N, 1], block_shape=[ROWS, COLS])
        y = tl.program_id(1) * ROWS
        x = tl.program_id(0) * COLS
        tile = src.load([y, x])
        dst.store([y, x], tile * scale + 1.0)

    return {
        "vector_add": add_kernel,
        "matmul": matmul_kernel,
        "softmax": softmax_kernel,
        "plane_sum": plane_sum_kernel,
        "tma_roundtrip": tma_roundtrip_kernel,
    }


def _triton_specs(kernels: dict, matmul_dtype: str) -> dict:
    """Per kernel: (fn, signature, constexprs, divisibility-16 arg indices, options).

    Divisibility hints mirror what the JIT infers at a launch with 16-byte-aligned tensors and sizes
    that are multiples of 16 (pointers, sizes and row strides; unit strides are left as plain i32).
    """
    block = 1024  # next_pow2(cols) for 1000 < cols <= 1024
    return {
        "vector_add": (
            kernels["vector_add"],
            {"x_ptr": "*fp32", "y_ptr": "*fp32", "output_ptr": "*fp32", "n_elements": "i32", "BLOCK_SIZE": "constexpr"},
            {"BLOCK_SIZE": 1024},
            (0, 1, 2, 3),
            {"num_warps": 4},
        ),
        "matmul": (
            kernels["matmul"],
            {
                "a_ptr": f"*{matmul_dtype}",
                "b_ptr": f"*{matmul_dtype}",
                "c_ptr": f"*{matmul_dtype}",
                "M": "i32",
                "N": "i32",
                "K": "i32",
                "stride_am": "i32",
                "stride_ak": "i32",
                "stride_bk": "i32",
                "stride_bn": "i32",
                "stride_cm": "i32",
                "stride_cn": "i32",
                "BLOCK_SIZE_M": "constexpr",
                "BLOCK_SIZE_N": "constexpr",
                "BLOCK_SIZE_K": "constexpr",
                "GROUP_SIZE_M": "constexpr",
            },
            {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 8},
            (0, 1, 2, 3, 4, 5, 6, 8, 10),
            {"num_warps": 4, "num_stages": 3},
        ),
        "softmax": (
            kernels["softmax"],
            {
                "output_ptr": "*fp32",
                "input_ptr": "*fp32",
                "input_row_stride": "i32",
                "output_row_stride": "i32",
                "n_cols": "i32",
                "BLOCK_SIZE": "constexpr",
            },
            {"BLOCK_SIZE": block},
            (0, 1, 2, 3, 4),
            {"num_warps": 4},
        ),
        "plane_sum": (
            kernels["plane_sum"],
            {"data_ptr": "*fp32", "partial_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr", "PLANE": "constexpr"},
            {"BLOCK": 256, "PLANE": 32},
            (0, 1, 2),
            {"num_warps": 8},
        ),
        "tma_roundtrip": (
            kernels["tma_roundtrip"],
            {
                "src_ptr": "*fp32",
                "dst_ptr": "*fp32",
                "M": "i32",
                "N": "i32",
                "scale": "fp32",
                "ROWS": "constexpr",
                "COLS": "constexpr",
            },
            {"ROWS": 16, "COLS": 32},
            (0, 1, 3),
            {"num_warps": 4},
        ),
    }


def triton_compile(src, options: dict):
    """``triton.compile`` of ``src`` for sm_90 into a fresh, empty cache directory (removed afterwards)."""
    import triton
    from triton.backends.compiler import GPUTarget

    cache_dir = tempfile.mkdtemp(prefix="triton_cache_")
    old = os.environ.get("TRITON_CACHE_DIR")
    os.environ["TRITON_CACHE_DIR"] = cache_dir
    try:
        compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(options))
        if not compiled.asm.get("cubin"):
            raise RuntimeError("triton.compile produced no cubin")
        return compiled
    finally:
        if old is None:
            os.environ.pop("TRITON_CACHE_DIR", None)
        else:
            os.environ["TRITON_CACHE_DIR"] = old
        shutil.rmtree(cache_dir, ignore_errors=True)


def _triton_sample(spec) -> float:
    """One cold Triton compile to a cubin for sm_90 into an empty cache directory. Seconds."""
    from triton.compiler import ASTSource

    fn, signature, constexprs, divisible, options = spec
    start = time.perf_counter()
    attrs = {(i,): [["tt.divisibility", 16]] for i in divisible}
    src = ASTSource(fn=fn, signature=dict(signature), constexprs=dict(constexprs), attrs=attrs)
    triton_compile(src, options)
    return time.perf_counter() - start


def bench_triton(repeats: int, matmul_dtype: str) -> dict:
    """Triton's first compile in the process, then ``repeats`` cold samples per kernel; or a skip reason."""
    try:
        import triton

        kernels = _triton_kernels()
    except Exception as exc:  # not installed, or it cannot import here
        return {"skipped": f"triton unavailable: {type(exc).__name__}: {exc}"}
    specs = _triton_specs(kernels, matmul_dtype)
    try:
        first = _triton_sample(specs[KERNELS[0]])
    except Exception as exc:  # e.g. a build without the NVIDIA backend or ptxas
        return {"skipped": f"triton {triton.__version__} cannot compile for sm_90 here: {type(exc).__name__}: {exc}"}
    out: dict = {
        "version": triton.__version__,
        "matmul_dtype": matmul_dtype,
        "first_in_process": {"kernel": KERNELS[0], "total_s": first},
    }
    for name in KERNELS:
        samples = [_triton_sample(specs[name]) for _ in range(repeats)]
        out[name] = {"median_s": statistics.median(samples), "samples_s": samples}
    return out


# ----------------------------------------------------------------------------------------------- report


def _fmt_stages(stages: dict) -> str:
    return " ".join(f"{k}={v * 1e3:.1f}" for k, v in stages.items() if k != "total")


def report(results: dict) -> None:
    """Print the comparison table and the per-stage breakdown."""
    cube, tri = results["cubepy"], results["triton"]
    skipped = tri.get("skipped")
    print(
        f"compile to cubin, target {TARGET} / GPUTarget('cuda', 90, 32); medians of {results['repeats']} "
        f"cold samples, ms"
    )
    print(
        f"cubepy first in process ({cube['first_in_process']['kernel']}, pays llvmlite load): "
        f"{cube['first_in_process']['total_s'] * 1e3:.1f} ms  [{_fmt_stages(cube['first_in_process']['stages'])}]"
    )
    if skipped:
        print(f"triton: SKIPPED ({skipped})")
    else:
        print(
            f"triton {tri['version']} first in process ({tri['first_in_process']['kernel']}, pays its setup): "
            f"{tri['first_in_process']['total_s'] * 1e3:.1f} ms"
        )
        print(
            f"triton matmul inputs: {tri['matmul_dtype']} (fp32 accumulate), BLOCK 128x128x64, num_warps=4 num_stages=3"
        )
    print()
    header = f"{'kernel':12s} {'cubepy first':>13s} {'cubepy med':>11s} {'triton med':>11s} {'ratio c/t':>10s}"
    print(header)
    print("-" * len(header))
    first_kernel = cube["first_in_process"]["kernel"]
    for name in KERNELS:
        c = cube[name]["median_s"] * 1e3
        first = f"{cube['first_in_process']['total_s'] * 1e3:.1f}" if name == first_kernel else "-"
        if skipped:
            t_text, ratio = "skipped", "-"
        else:
            t = tri[name]["median_s"] * 1e3
            t_text, ratio = f"{t:.1f}", f"{c / t:.2f}"
        print(f"{name:12s} {first:>13s} {c:11.1f} {t_text:>11s} {ratio:>10s}")
    print()
    print("cubepy median stages, ms (child_* are parts of llvm_opt+emit; total is wall time of expand + compile):")
    for name in KERNELS:
        stages = cube[name]["median_stages_s"]
        print(f"  {name:12s} {_fmt_stages(stages)} total={stages['total'] * 1e3:.1f}")
        if not cube[name]["cubin"]:
            print(f"  {'':12s} (no cubin: {cube[name]['ptxas_status']})")


def main(argv: list[str] | None = None) -> int:
    """Run both compilers, print a table, optionally write JSON."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5, help="cold samples per kernel (median reported)")
    parser.add_argument("--json", help="write the figures to this file")
    parser.add_argument(
        "--triton-matmul-dtype",
        default="fp16",
        choices=("fp16", "fp32"),
        help="input dtype of Triton's matmul (the tutorial uses fp16; cubepy's is fp32)",
    )
    args = parser.parse_args(argv)
    results = {
        "target": TARGET,
        "repeats": args.repeats,
        "cubepy": bench_cubepy(args.repeats),
        "triton": bench_triton(args.repeats, args.triton_matmul_dtype),
    }
    report(results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


# Public names for ``python -m benchmarks`` (which runs each sample in a fresh process).
cubepy_sample = _cubepy_sample
triton_kernels = _triton_kernels
triton_specs = _triton_specs
triton_sample = _triton_sample
