"""``python -m benchmarks.attention_sass``: the attention kernels' SASS beside Triton's ``_attn_fwd``, no GPU needed.

cubepy's side is ``cubepy_layouts.attention``: the Hopper kernel (``kernel="wgmma"``: a TMA producer warpgroup,
consumer warpgroups on ``wgmma``) at head dims 64 and 128, causal and not, and the sm_80 kernel
(``kernel="mma_sync"``, a ``cp.async`` pipeline).  Triton's side is its tutorial 06 ``_attn_fwd`` compiled with
``triton.compile`` for the same architecture: host TMA descriptors at sm_90a (with and without
``warp_specialize``), pointers at sm_80, non-causal (``STAGE`` 1) and causal (``STAGE`` 3).

Per kernel: registers, shared memory, spills, SASS instructions (no NOPs), and the loops that issue tensor-core
instructions (``HGMMA`` or ``HMMA``): the main loop (the smallest, which every unmasked key block runs) and, for
a kernel with a second one, the masked loop (the largest: the blocks crossing the causal diagonal or the end of
the keys).  Tiles differ between kernels (a round of cubepy's
loop covers ``stages`` key blocks per consumer warpgroup of 64 rows; Triton's covers one block of ``BLOCK_M``
rows), so a loop is also given **per 64 x 64 block**: its instructions times 4096 over the rows x keys its
tensor-core instructions cover per issuing warpgroup (``HGMMA``) or warp (``HMMA``), read off their shapes:
each key block costs a ``Q K^T`` and a ``P V`` product of ``rows x keys x head_dim`` each.  Compare that column
between kernels of the same target.  Static counts only: nothing runs, nothing is timed.  Needs ``cuobjdump`` and
Triton (the ``bench`` extra) for Triton's rows; without Triton only cubepy's rows are printed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.sass import find_cuda_tool, loop_bodies, sass_of  # noqa: E402
from benchmarks.triton_tutorials import missing_tools  # noqa: E402  (cuobjdump and ptxas: what cubepy's rows need)

# Tensor-core instructions and the multiply volume (m x n x k) of one: HGMMA.64x64x16.F32.BF16, HMMA.16816.F32
_HGMMA = re.compile(r"^[HQ]GMMA\.(\d+)x(\d+)x(\d+)")
_HMMA = re.compile(r"^HMMA\.(16816|1688|884)")
_HMMA_SHAPES = {"16816": (16, 8, 16), "1688": (16, 8, 8), "884": (8, 8, 4)}
BLOCK = 64 * 64  # the rows x keys the per-block column is normalised to
SHAPE = (4, 32, 1024)  # Triton's benchmark: batch 4, 32 heads, 1024 tokens


def _mma_volume(text: str) -> int:
    """The multiply volume of one tensor-core instruction, 0 for any other instruction."""
    text = text.split(" ", 1)[-1] if text.startswith("@") else text
    if m := _HGMMA.match(text):
        a, b, c = map(int, m.groups())
        return a * b * c
    if m := _HMMA.match(text):
        a, b, c = _HMMA_SHAPES[m.group(1)]
        return a * b * c
    return 0


def _loop_figures(body: list[str], head_dim: int) -> tuple[int, int, float, float | None]:
    """(length, tensor-core instructions, rows x keys they cover, length per 64 x 64 block) of one loop."""
    rows_x_keys = sum(_mma_volume(t) for t in body) / (2 * head_dim)  # Q K^T and P V: rows x keys x head_dim each
    per_block = len(body) * BLOCK / rows_x_keys if rows_x_keys else None
    return len(body), sum(bool(_mma_volume(t)) for t in body), rows_x_keys, per_block


def hot_loop(sass_text: str, head_dim: int) -> dict:
    """The loops of a ``cuobjdump -sass`` listing that issue tensor-core instructions: the main one (the smallest:
    the loop every unmasked key block runs) and, where there is a second, the masked one (the largest: the
    blocks crossing the causal diagonal or the end of the keys), with their lengths, tensor-core instructions,
    the rows x keys they cover (for a ``head_dim`` head) and their lengths per 64 x 64 block."""
    _, loops = loop_bodies(sass_text)
    with_mma = sorted((body for body in loops if any(_mma_volume(t) for t in body)), key=len)
    main = _loop_figures(with_mma[0], head_dim) if with_mma else (0, 0, 0.0, None)
    masked = _loop_figures(with_mma[-1], head_dim) if len(with_mma) > 1 else None
    return {
        "hot_loop": main[0],
        "mma_in_loop": main[1],
        "rows_x_keys": main[2],
        "per_block": main[3],
        "masked_loop": masked[0] if masked else None,
        "masked_per_block": masked[3] if masked else None,
    }


def describe(cubin: bytes, entry: str, head_dim: int, cuobjdump: str) -> dict:
    """Resources, SASS size and ``hot_loop`` figures of ``entry`` in ``cubin``."""
    usage = sass_of(cubin, entry, cuobjdump)
    with tempfile.TemporaryDirectory(prefix="cubepy-attention-sass-") as tmp:
        path = Path(tmp) / "k.cubin"
        path.write_bytes(cubin)
        text = subprocess.run(
            [cuobjdump, "-sass", "-fun", entry, str(path)], capture_output=True, text=True, check=True
        ).stdout
    return {
        "registers": usage.registers,
        "shared": usage.shared,
        "spills": usage.local + usage.stack,
        "sass": usage.instructions,
        **hot_loop(text, head_dim),
    }


def cubepy_attention(cuobjdump: str, head_dim: int, causal: bool, **config: Any) -> dict:
    """One of the library's kernels (``AttentionConfig(**config)``) compiled for its architecture, f16, with lse."""
    import numpy as np

    import cubepy as cp
    from cubepy_layouts.attention import AttentionConfig
    from cubepy_layouts.attention.api import flash_attention_launch

    client = cp.client("interp")
    batch, heads, seq = SHAPE
    q = client.zeros((batch, heads, seq, head_dim), np.float16)
    o = client.zeros((batch, heads, seq, head_dim), np.float16)
    lse = client.zeros((batch, heads, seq), np.float32)
    attention_config = AttentionConfig(**config)
    target = "sm_90a" if attention_config.kernel == "wgmma" else "sm_80"
    compiled = flash_attention_launch(q, q, q, o, lse, causal=causal, config=attention_config).compile(target)
    if compiled.cubin is None:
        raise RuntimeError(f"ptxas did not assemble the attention kernel: {compiled.ptxas_status}")
    result = describe(compiled.cubin, compiled.name, head_dim, cuobjdump)
    result["shared"] += compiled.dynamic_shared_bytes
    result["target"] = target
    return result


def triton_attention(cuobjdump: str, target: str, head_dim: int, causal: bool, warp_specialize: bool) -> dict:
    """Triton's tutorial ``_attn_fwd`` for ``target`` at its own tile (128 x 64 at sm_90a, 64 x 64 below)."""
    import triton
    from triton import compile as triton_compile
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from benchmarks.triton_specs import _attn_fwd, _specialize, capability

    cc = capability(target)
    hopper = cc >= 90
    block_m, block_n, warps, stages = (128, 64, 4, 2) if hopper else (64, 64, 4, 3)
    if hopper:
        q_o, k_v = f"tensordesc<fp16[{block_m},{head_dim}]>", f"tensordesc<fp16[{block_n},{head_dim}]>"
        descs = {"desc_q": q_o, "desc_k": k_v, "desc_v": k_v, "desc_o": q_o}
    else:
        descs = {"desc_q": "*fp16", "desc_k": "*fp16", "desc_v": "*fp16", "desc_o": "*fp16"}
    batch, heads, seq = SHAPE
    args = {"sm_scale": "fp32", "M": "*fp32", "Z": batch, "H": heads, **descs, "N_CTX": seq}
    consts = {"HEAD_DIM": head_dim, "BLOCK_M": block_m, "BLOCK_N": block_n, "FP8_OUTPUT": False}
    consts |= {"STAGE": 3 if causal else 1, "warp_specialize": warp_specialize, "IS_HOPPER": hopper}
    spec = _specialize(_attn_fwd, args, consts, num_warps=warps, num_stages=stages)
    source = ASTSource(fn=spec.fn, signature=spec.signature, constexprs=spec.constexprs, attrs=spec.attrs)
    options = {"num_warps": spec.num_warps, "num_stages": spec.num_stages}
    compiled = triton_compile(source, target=GPUTarget("cuda", cc, 32), options=options)
    result = describe(compiled.asm["cubin"], compiled.metadata.name, head_dim, cuobjdump)
    result["shared"] = compiled.metadata.shared  # Triton's shared memory is dynamic: cuobjdump shows none
    result["target"] = target
    result["version"] = triton.__version__
    return result


def cases() -> list[tuple[str, str, dict]]:
    """(row label, side, arguments) of every kernel in the table.

    Triton's ``warp_specialize=True`` form of ``_attn_fwd`` is left out: Triton 3.9 fails to compile it this way
    (its ``NVGPUWarpSpecialization`` pass stops with an error when ``triton.compile`` builds it for sm_90a here)."""
    rows: list[tuple[str, str, dict]] = []
    for head_dim in (64, 128):
        for causal in (False, True):
            mask = "causal" if causal else "non-causal"
            hopper = {"head_dim": head_dim, "causal": causal, "kernel": "wgmma", "block_m": 128, "block_n": 64}
            rows.append((f"cubepy wgmma 128x64, 2 stages, D {head_dim}, {mask}", "cubepy", hopper | {"stages": 2}))
            theirs = {"target": "sm_90a", "head_dim": head_dim, "causal": causal, "warp_specialize": False}
            rows.append((f"Triton _attn_fwd sm_90a 128x64, D {head_dim}, {mask}", "triton", theirs))
    for causal in (False, True):
        mask = "causal" if causal else "non-causal"
        mine = {"head_dim": 64, "causal": causal, "kernel": "mma_sync"}
        rows.append((f"cubepy mma_sync 64x64, D 64, {mask}", "cubepy", mine))
        theirs = {"target": "sm_80", "head_dim": 64, "causal": causal, "warp_specialize": False}
        rows.append((f"Triton _attn_fwd sm_80 64x64, D 64, {mask}", "triton", theirs))
    return rows


def measure(only: tuple[str, ...] = ()) -> list[dict]:
    """One row per case (a failure is a row saying why); Triton's rows are left out without Triton."""
    reason = missing_tools()
    if reason is not None:
        raise RuntimeError(reason)
    cuobjdump = find_cuda_tool("cuobjdump")
    assert cuobjdump is not None
    try:
        import triton  # noqa: F401

        have_triton = True
    except ImportError:
        have_triton = False
    rows = []
    for label, side, arguments in cases():
        if only and not any(o.lower() in label.lower() for o in only):
            continue
        if side == "triton" and not have_triton:
            continue
        try:
            figures = (cubepy_attention if side == "cubepy" else triton_attention)(cuobjdump, **arguments)
        except Exception as error:  # one kernel that does not compile must not hide the others
            rows.append({"kernel": label, "error": f"{type(error).__name__}: {error}"})
            continue
        rows.append({"kernel": label, **figures})
    return rows


def format_table(rows: list[dict]) -> str:
    """The rows as a Markdown table."""
    lines = [
        "| kernel | target | regs | shared bytes | spills | SASS | main loop | MMA in loop | rows x keys per trip "
        "| main loop per 64x64 block | masked loop | masked loop per 64x64 block |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def figure(value: float | None) -> str:
        return "-" if value is None else f"{value:.0f}"

    for row in rows:
        if "error" in row:
            lines.append(f"| {row['kernel']} | failed: {row['error']} |" + " |" * 10)
            continue
        lines.append(
            f"| {row['kernel']} | {row['target']} | {row['registers']} | {row['shared']} | {row['spills']} "
            f"| {row['sass']} | {row['hot_loop']} | {row['mma_in_loop']} | {row['rows_x_keys']:.0f} "
            f"| {figure(row['per_block'])} | {figure(row['masked_loop'])} | {figure(row['masked_per_block'])} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Print the table (and write ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="*", default=(), help="rows whose label contains one of these")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)
    reason = missing_tools()
    if reason is not None:
        print(f"skipped: {reason}")
        return 0
    rows = measure(tuple(args.only))
    print(format_table(rows))
    if importlib.util.find_spec("triton") is None:
        print("\n(Triton is not installed: pip install triton (the bench extra) for its rows)")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
