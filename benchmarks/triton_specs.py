"""How Triton's tutorial kernels (``benchmarks.triton_tutorial_kernels``) are compiled without a GPU.

``spec(name, capability)`` says how each is compiled: the argument types, the constexprs and ``num_warps`` /
``num_stages`` the tutorial launches it with for its own test shape, and the specialisation Triton's launcher
would make for that shape (an integer argument equal to 1 becomes a constant, one divisible by 16 and every
16-byte aligned pointer get ``tt.divisibility = 16``), so the SASS is what the tutorial would run.  Where a
tutorial autotunes, the config is one of its own list, the one closest to the cubepy kernel it is set against
(the tiles must match for the hot loops to compare); ``TritonSpec.note`` says which.  ``_attn_fwd`` is compiled
with pointer arguments (device-side descriptors, lowered to plain loads before Hopper) below sm_90 and with
host TMA descriptors at sm_90.

``spec(name, target, ragged=True)`` compiles the element-wise and row kernels (``RAGGED``) for a size Triton
cannot prove a multiple of 16 (one less element, a row of 1023 or 8190 items): without the divisibility hint
its loads and stores are one item wide, as those of a cubepy kernel written for any size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Importing the kernels first sets Triton's environment (fp fusion, ptxas path) before anything else of Triton.
from benchmarks.triton_tutorial_kernels import (
    _attn_fwd,
    _layer_norm_bwd_dwdb,
    _layer_norm_bwd_dx_fused,
    _layer_norm_fwd_fused,
    _seeded_dropout,
    add_kernel,
    asin_kernel,
    grouped_matmul_kernel,
    matmul_kernel,
    matmul_kernel_persistent,
    softmax_kernel,
)


@dataclass(frozen=True)
class TritonSpec:
    """One Triton kernel ready for ``triton.compile``: its ``ASTSource`` parts and options."""

    fn: Any
    signature: dict[str, str]
    constexprs: dict[str, Any]
    attrs: dict[tuple[int, ...], list] = field(default_factory=dict)
    num_warps: int = 4
    num_stages: int = 3
    note: str = ""


def _specialize(fn, args: dict[str, Any], constexprs: dict[str, Any], **options: Any) -> TritonSpec:
    """What Triton's launcher makes of ``args`` (type strings for pointers and floats, sample values for ints).

    An int equal to 1 becomes a constexpr, an int divisible by 16 and every pointer (a torch allocation is
    256-byte aligned) get ``tt.divisibility = 16``: the specialisation the tutorial's launch would get."""
    names = fn.arg_names
    signature: dict[str, str] = {}
    consts = dict(constexprs)
    attrs: dict[tuple[int, ...], list] = {}
    for name in names:
        if name in constexprs:
            signature[name] = "constexpr"
            continue
        value = args[name]
        index = (names.index(name),)
        if isinstance(value, bool) or not isinstance(value, int):
            signature[name] = value
            if value.startswith("*"):
                attrs[index] = [["tt.divisibility", 16]]
        elif value == 1:
            signature[name] = "constexpr"
            consts[name] = 1
        else:
            signature[name] = "i32"
            if value % 16 == 0:
                attrs[index] = [["tt.divisibility", 16]]
    return TritonSpec(fn, signature, consts, attrs, **options)


def _elements(ragged: bool) -> int:
    """The element-wise tutorials' size: 98432, or one less (not a multiple of 16)."""
    return 98431 if ragged else 98432


def _add(cc: int, ragged: bool = False) -> TritonSpec:
    n = _elements(ragged)
    args = {"x_ptr": "*fp32", "y_ptr": "*fp32", "output_ptr": "*fp32", "n_elements": n}
    return _specialize(add_kernel, args, {"BLOCK_SIZE": 1024}, note=f"n = {n}, BLOCK_SIZE 1024, 4 warps")


def _softmax(cc: int, ragged: bool = False) -> TritonSpec:
    # The tutorial: BLOCK_SIZE = next_power_of_2(n_cols), 8 warps, 4 stages where shared memory > 200 KB (H100)
    stages = 4 if cc >= 90 else 2
    cols = 1023 if ragged else 1024
    args = {"output_ptr": "*fp32", "input_ptr": "*fp32", "input_row_stride": cols, "output_row_stride": cols}
    args |= {"n_rows": 4096, "n_cols": cols}
    return _specialize(
        softmax_kernel,
        args,
        {"BLOCK_SIZE": 1024, "num_stages": stages},
        num_warps=8,
        num_stages=stages,
        note=f"4096 x {cols} f32, BLOCK_SIZE 1024, 8 warps, {stages} stages",
    )


def _matmul(cc: int) -> TritonSpec:
    args = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "M": 512, "N": 512, "K": 512}
    args |= {"stride_am": 512, "stride_ak": 1, "stride_bk": 512, "stride_bn": 1, "stride_cm": 512, "stride_cn": 1}
    blocks = {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8, "ACTIVATION": ""}
    return _specialize(
        matmul_kernel,
        args,
        blocks,
        num_warps=4,
        num_stages=4,
        note="512^3 f16; 64x64x32 tiles (cubepy's; the autotune list has 64x128x32 and 128x64x32), 4 warps, 4 stages",
    )


def _dropout(cc: int, ragged: bool = False) -> TritonSpec:
    n = _elements(ragged)
    args = {"x_ptr": "*fp32", "output_ptr": "*fp32", "n_elements": n, "p": "fp32", "seed": 123}
    return _specialize(_seeded_dropout, args, {"BLOCK_SIZE": 1024}, note=f"n = {n}, BLOCK_SIZE 1024, 4 warps")


def _row_items(ragged: bool) -> int:
    """The layer-norm rows: 8192 items, or 8190 (not a multiple of 16)."""
    return 8190 if ragged else 8192


def _ln_fwd(cc: int, ragged: bool = False) -> TritonSpec:
    # 1151 x 8192 f16: BLOCK_SIZE = min(65536 // 2, next_power_of_2(N)), num_warps = min(max(BLOCK_SIZE // 256, 1), 8)
    n = _row_items(ragged)
    args = {"X": "*fp16", "Y": "*fp16", "W": "*fp16", "B": "*fp16", "Mean": "*fp32", "Rstd": "*fp32"}
    args |= {"stride": n, "N": n, "eps": "fp32"}
    return _specialize(
        _layer_norm_fwd_fused, args, {"BLOCK_SIZE": 8192}, num_warps=8, note=f"1151 x {n} f16, BLOCK_SIZE 8192, 8 warps"
    )


def _ln_bwd_dx(cc: int, ragged: bool = False) -> TritonSpec:
    n = _row_items(ragged)
    args = {"DX": "*fp16", "DY": "*fp16", "DW": "*fp16", "DB": "*fp16", "X": "*fp16", "W": "*fp16"}
    args |= {"Mean": "*fp32", "Rstd": "*fp32", "Lock": "*i32", "stride": n, "N": n}
    return _specialize(
        _layer_norm_bwd_dx_fused,
        args,
        {"GROUP_SIZE_M": 96, "BLOCK_SIZE_N": 8192},
        num_warps=8,
        note=f"1151 x {n} f16, GROUP_SIZE_M 96, BLOCK_SIZE_N 8192, 8 warps",
    )


def _ln_bwd_dwdb(cc: int) -> TritonSpec:
    args = {"DW": "*fp16", "DB": "*fp16", "FINAL_DW": "*fp16", "FINAL_DB": "*fp16", "M": 96, "N": 8192}
    return _specialize(
        _layer_norm_bwd_dwdb,
        args,
        {"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 128},
        note="96 partial rows x 8192 f16, 32 x 128 blocks, 4 warps",
    )


def _attention(cc: int) -> TritonSpec:
    # Non-causal (STAGE 1), f16, HEAD_DIM 64, Z=4, H=32, N_CTX=1024 (the tutorial's benchmark shape).
    hopper = cc >= 90
    block_m, block_n, warps, stages = (128, 64, 4, 2) if hopper else (64, 64, 4, 3)
    if hopper:  # host TMA descriptors
        q_o, k_v = f"tensordesc<fp16[{block_m},64]>", f"tensordesc<fp16[{block_n},64]>"
        descs = {"desc_q": q_o, "desc_k": k_v, "desc_v": k_v, "desc_o": q_o}
    else:  # pointers: device-side descriptors, plain loads before Hopper
        descs = {"desc_q": "*fp16", "desc_k": "*fp16", "desc_v": "*fp16", "desc_o": "*fp16"}
    args = {"sm_scale": "fp32", "M": "*fp32", "Z": 4, "H": 32, **descs, "N_CTX": 1024}
    consts = {"HEAD_DIM": 64, "BLOCK_M": block_m, "BLOCK_N": block_n, "FP8_OUTPUT": False, "STAGE": 1}
    consts |= {"warp_specialize": False, "IS_HOPPER": hopper}
    form = "TMA descriptors; the tutorial's pytest config" if hopper else "pointers; cubepy's tile"
    return _specialize(
        _attn_fwd,
        args,
        consts,
        num_warps=warps,
        num_stages=stages,
        note=f"4x32x1024x64 f16, non-causal, {block_m}x{block_n}, {warps} warps, {stages} stages ({form})",
    )


def _asin(cc: int, ragged: bool = False) -> TritonSpec:
    n = _elements(ragged)
    args = {"x_ptr": "*fp32", "y_ptr": "*fp32", "n_elements": n}
    return _specialize(asin_kernel, args, {"BLOCK_SIZE": 1024}, note=f"n = {n}, BLOCK_SIZE 1024, 4 warps")


def _grouped(cc: int) -> TritonSpec:
    # Device tables of 64-bit addresses, i32 sizes and leading dimensions, 4 problems; config 64x64x32 / 84 SMs.
    args = {"group_a_ptrs": "*i64", "group_b_ptrs": "*i64", "group_c_ptrs": "*i64"}
    args |= {"group_gemm_sizes": "*i32", "g_lds": "*i32", "group_size": 4}
    consts = {"NUM_SM": 84, "BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32}
    return _specialize(
        grouped_matmul_kernel, args, consts, note="4 problems, 64x64x32 tiles, NUM_SM 84, 4 warps, 3 stages"
    )


def _persistent(cc: int) -> TritonSpec:
    args = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "M": 8192, "N": 8192, "K": 512}
    args |= {"stride_am": 512, "stride_ak": 1, "stride_bk": 8192, "stride_bn": 1, "stride_cm": 8192, "stride_cn": 1}
    sms = 132 if cc >= 90 else 108
    consts = {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8, "NUM_SMS": sms}
    return _specialize(
        matmul_kernel_persistent,
        args,
        consts,
        num_warps=4,
        num_stages=3,
        note=f"8192 x 8192 x 512 f16; 64x64x32 tiles (cubepy's; the autotune list has 128-row tiles), 4 warps, "
        f"3 stages, NUM_SMS {sms}",
    )


SPECS = {
    "add_kernel": _add,
    "softmax_kernel": _softmax,
    "matmul_kernel": _matmul,
    "_seeded_dropout": _dropout,
    "_layer_norm_fwd_fused": _ln_fwd,
    "_layer_norm_bwd_dx_fused": _ln_bwd_dx,
    "_layer_norm_bwd_dwdb": _ln_bwd_dwdb,
    "_attn_fwd": _attention,
    "asin_kernel": _asin,
    "grouped_matmul_kernel": _grouped,
    "matmul_kernel_persistent": _persistent,
}


def capability(target: str) -> int:
    """``"sm_90a"`` -> 90, ``"sm_80"`` -> 80."""
    return int("".join(ch for ch in target.removeprefix("sm_") if ch.isdigit()))


# The kernels ``spec`` can compile for a ragged size.
RAGGED = (
    "add_kernel",
    "softmax_kernel",
    "_seeded_dropout",
    "_layer_norm_fwd_fused",
    "_layer_norm_bwd_dx_fused",
    "asin_kernel",
)


def spec(name: str, target: str = "sm_90a", ragged: bool = False) -> TritonSpec:
    """How Triton's kernel ``name`` is compiled for ``target`` (``ragged``: for a size not a multiple of 16)."""
    if name not in SPECS:
        raise KeyError(f"no Triton tutorial kernel named {name!r}; known: {', '.join(SPECS)}")
    if not ragged:
        return SPECS[name](capability(target))
    if name not in RAGGED:
        raise KeyError(f"{name!r} has no ragged size; those that do: {', '.join(RAGGED)}")
    return SPECS[name](capability(target), ragged=True)  # type: ignore[call-arg]


def compile_triton(name: str, target: str = "sm_90a", ragged: bool = False) -> tuple[bytes, str, TritonSpec]:
    """The cubin of Triton's kernel ``name`` for ``target`` (no GPU needed), its entry name and its spec."""
    from triton import compile as triton_compile
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    s = spec(name, target, ragged)
    source = ASTSource(fn=s.fn, signature=s.signature, constexprs=s.constexprs, attrs=s.attrs)
    options = {"num_warps": s.num_warps, "num_stages": s.num_stages}
    compiled = triton_compile(source, target=GPUTarget("cuda", capability(target), 32), options=options)
    return compiled.asm["cubin"], compiled.metadata.name, s
