"""``python -m benchmarks.triton_tutorials``: cubepy's ports of Triton's tutorials beside Triton's own kernels, in SASS.

Every module ``examples/triton/tNN_<name>.py`` lists its ``SASS_CASES`` (``examples.triton.SassCase``): how to
compile a cubepy kernel, which of its SASS to count (``measure``: the whole kernel, its largest hot loop, or its
main tensor-core loop) and
which of Triton's tutorial kernels (``benchmarks.triton_tutorial_kernels``) it is set against.  Each case is
compiled checked (``launch``'s mode), ``unchecked=True`` and checked with ``fastmath=True`` (Triton's own
``/`` and ``exp`` are the approximate forms; cubepy's default is IEEE division and libdevice) for its ``target``; Triton's kernel is compiled for
the same target with Triton's own compiler, no GPU needed, assembled by the same ptxas (the one on PATH).  The
table gives the instruction counts (``cuobjdump -sass``, NOPs left out; a loop is the instructions from a
backward branch's target to the branch), the ratios cubepy/Triton, the registers and the local-memory (spill)
bytes of both, and every loop's size (smallest first: where loops nest, ``measure="loop"`` counts the largest,
the outer one, and the list shows the inner ones).  The last lines are the geometric means of the ratios and the worst one.

A tutorial without a module yet is listed as "not ported"; a new module is picked up as it appears.  Without
Triton (``pip install triton==3.9.0``, the ``bench`` extra) the Triton columns are skipped, with the reason,
and cubepy's figures are still printed.  Needs ptxas and ``cuobjdump`` (``nvidia-cuda-cuobjdump``); without
them it says why and exits 0.

Options: ``--only TEXT`` (substring of a tutorial, part or Triton kernel name, repeatable), ``--json PATH``.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import re
import sys
import traceback
from pathlib import Path
from typing import Any

from benchmarks.sass import find_cuda_tool, geometric_mean, sass_of

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
TUTORIAL_DIR = ROOT / "examples" / "triton"
TUTORIALS = {
    "01": "vector add",
    "02": "fused softmax",
    "03": "matrix multiplication",
    "04": "low-memory dropout",
    "05": "layer norm",
    "06": "fused attention",
    "07": "extern functions",
    "08": "grouped GEMM",
    "09": "persistent matmul",
}
_MODULE = re.compile(r"^t(\d\d)_\w+\.py$")


def tutorial_modules(directory: Path = TUTORIAL_DIR) -> dict[str, str]:
    """``{"01": "examples.triton.t01_vector_add", ...}`` for the modules present in ``directory``."""
    found = {}
    for path in sorted(directory.glob("t[0-9][0-9]_*.py")):
        match = _MODULE.match(path.name)
        if match:
            found[match.group(1)] = f"examples.triton.{path.stem}"
    return found


def load_triton() -> tuple[Any, str | None]:
    """``(benchmarks.triton_specs, None)``, or ``(None, why)`` when Triton cannot be imported."""
    try:
        return importlib.import_module("benchmarks.triton_specs"), None
    except ImportError as error:
        return None, f"triton cannot be imported ({error}); pip install triton==3.9.0"


def missing_tools() -> str | None:
    """Why no SASS can be read here, or None."""
    if find_cuda_tool("cuobjdump") is None:
        return "cuobjdump not found: pip install nvidia-cuda-cuobjdump (the bench extra)"
    from cubepy.compiler import ptxas

    if not ptxas.available():
        return ptxas.unavailable_reason()
    return None


def measured(sass: dict, measure: str) -> int:
    """The count a case compares: the whole kernel, its largest loop, or its smallest loop that issues tensor-core
    instructions (``"mma_loop"``: the main loop where a kernel runs its tail blocks in a second, masked loop);
    the whole kernel when it has no such loop."""
    if measure == "loop" and sass["loops"]:
        return max(sass["loops"])
    if measure == "mma_loop" and sass["mma_loops"]:
        return min(sass["mma_loops"])
    return sass["instructions"]


def _sass(cubin: bytes, entry: str, cuobjdump: str) -> dict:
    from dataclasses import asdict

    return asdict(sass_of(cubin, entry, cuobjdump))


def _matches(only: tuple[str, ...], *names: str) -> bool:
    return not only or any(o.lower() in n.lower() for o in only for n in names)


def compare(only: tuple[str, ...] = (), triton_specs: Any = None) -> list[dict]:
    """One row per case (and one per tutorial not ported): cubepy checked and unchecked, and Triton's kernel."""
    cuobjdump = find_cuda_tool("cuobjdump")
    modules = tutorial_modules()
    rows: list[dict] = []
    for number, title in TUTORIALS.items():
        tutorial = f"{number} {title}"
        if number not in modules:
            if _matches(only, tutorial):
                rows.append({"tutorial": tutorial, "part": "not ported", "status": "not ported"})
            continue
        try:
            cases = importlib.import_module(modules[number]).SASS_CASES
        except Exception as error:  # a module being written may not import yet: say so, go on
            rows.append({"tutorial": tutorial, "part": "-", "status": f"import failed: {error!r}"})
            continue
        for case in cases:
            if not _matches(only, case.tutorial, case.label, case.triton):
                continue
            rows.append(_row(case, cuobjdump, triton_specs))
    return rows


def _row(case: Any, cuobjdump: str, triton_specs: Any) -> dict:
    row: dict[str, Any] = {
        "tutorial": case.tutorial,
        "part": case.label,
        "measure": case.measure,
        "target": case.target,
        "triton_kernel": case.triton,
        "status": "ok",
    }
    try:
        for mode, options in (("cubepy", {}), ("unchecked", {"unchecked": True}), ("fastmath", {"fastmath": True})):
            compiled = case.build(target=case.target, **options)
            row[mode] = _sass(compiled.cubin, compiled.name, cuobjdump)
    except Exception as error:
        row["status"] = f"cubepy failed: {error!r}"
        traceback.print_exc(file=sys.stderr)
        return row
    if triton_specs is None:
        return row
    ragged = case.triton_ragged
    try:
        cubin, entry, spec = triton_specs.compile_triton(case.triton, case.target, ragged)
        row["triton"] = _sass(cubin, entry, cuobjdump)
        row["triton_config"] = spec.note
        if ragged:  # and at the tutorial's size, for the other pairing
            cubin, entry, _ = triton_specs.compile_triton(case.triton, case.target)
            row["triton_tutorial_size"] = _sass(cubin, entry, cuobjdump)
    except Exception as error:
        row["status"] = f"triton failed: {error!r}"
        return row
    mine = measured(row["cubepy"], case.measure)
    theirs = measured(row["triton"], case.measure)
    row["ratio"] = mine / theirs
    row["ratio_unchecked"] = measured(row["unchecked"], case.measure) / theirs
    row["ratio_fastmath"] = measured(row["fastmath"], case.measure) / theirs
    row["ratio_tutorial_size"] = mine / measured(row.get("triton_tutorial_size", row["triton"]), case.measure)
    return row


def format_table(rows: list[dict], triton_note: str | None = None) -> str:
    """The rows as a Markdown table, then the geometric means and the worst ratio."""
    lines = [
        "| tutorial | part | target | measure | cubepy | unchecked | fast math | Triton | ratio | ratio unchecked "
        "| ratio fast math | regs cubepy / Triton | spill bytes cubepy / Triton | loops cubepy / Triton |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        if "cubepy" not in row:
            lines.append(f"| {row['tutorial']} | {row['part']} | | | | | | | | | | | | {row['status']} |")
            continue
        measure = row["measure"]
        mine, free, fast, theirs = row["cubepy"], row["unchecked"], row.get("fastmath"), row.get("triton")
        cells = [
            row["tutorial"],
            row["part"],
            row["target"],
            measure,
            str(measured(mine, measure)),
            str(measured(free, measure)),
            str(measured(fast, measure)) if fast else "-",
            _triton_cell(row, measure),
            f"{row['ratio']:.2f}" if "ratio" in row else "-",
            f"{row['ratio_unchecked']:.2f}" if "ratio_unchecked" in row else "-",
            f"{row['ratio_fastmath']:.2f}" if "ratio_fastmath" in row else "-",
            f"{mine['registers']} / {theirs['registers'] if theirs else '-'}",
            f"{mine['local']} / {theirs['local'] if theirs else '-'}",
            f"{_loops(mine['loops'])} / {_loops(theirs['loops']) if theirs else '-'}",
        ]
        if row["status"] != "ok":
            cells[-1] += f" ({row['status']})"
        lines.append("| " + " | ".join(cells) + " |")
    compared = [r for r in rows if "ratio" in r]
    if triton_note:
        lines.append(f"\nTriton column skipped: {triton_note}")
    if compared:
        worst = max(compared, key=lambda r: r["ratio"])
        means = [
            f"**{geometric_mean([r['ratio'] for r in compared]):.3f}** checked",
            f"**{geometric_mean([r['ratio_unchecked'] for r in compared]):.3f}** unchecked",
        ]
        if all("ratio_fastmath" in r for r in compared):
            means.append(f"**{geometric_mean([r['ratio_fastmath'] for r in compared]):.3f}** checked with fast math")
        lines.append(
            f"\nGeometric mean cubepy/Triton over {len(compared)} kernels: {', '.join(means)}; "
            f"worst {worst['ratio']:.2f} ({worst['tutorial']}, {worst['part']})"
        )
        if any("triton_tutorial_size" in r for r in compared):
            at_size = geometric_mean([r["ratio_tutorial_size"] for r in compared])
            lines.append(
                "\nThe kernels marked (ragged) are written for any size and set against Triton compiled for a size "
                "that is not a multiple of 16; against Triton at the tutorial's size (a multiple of 16, where its "
                f"accesses are 16 bytes wide) the checked geometric mean is **{at_size:.3f}**."
            )
    return "\n".join(lines)


def _triton_cell(row: dict, measure: str) -> str:
    """Triton's count; for a ragged pairing also its count at the tutorial's size."""
    theirs = row.get("triton")
    if not theirs:
        return "-"
    if "triton_tutorial_size" in row:
        return f"{measured(theirs, measure)} (ragged; {measured(row['triton_tutorial_size'], measure)} at a multiple of 16)"
    return str(measured(theirs, measure))


def _loops(sizes: list[int]) -> str:
    return ",".join(map(str, sizes)) if sizes else "none"


def main(argv: list[str] | None = None) -> int:
    """Print the table (and write the rows as JSON with ``--json``)."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.triton_tutorials",
        description=inspect.getdoc(sys.modules[__name__]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--only", action="append", default=[], help="substring of a tutorial, part or kernel name")
    parser.add_argument("--json", help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    reason = missing_tools()
    if reason:
        print(f"benchmarks.triton_tutorials skipped: {reason}")
        return 0
    triton_specs, triton_note = load_triton()
    rows = compare(tuple(args.only), triton_specs)
    print(format_table(rows, triton_note))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
