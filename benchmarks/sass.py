"""``python -m benchmarks.sass``: cubepy's SASS beside nvcc's for the same algorithms, kernel by kernel.

Each cubepy kernel in ``benchmarks.sass_kernels`` is compiled to an sm_90a cubin; its CUDA C++ twin in
``benchmarks/cuda/`` is compiled with ``nvcc -arch=sm_90a -O3 -cubin``.  For both the table gives
registers, shared memory and spill/local bytes (``cuobjdump --dump-resource-usage``), the SASS
instruction count without NOPs (``cuobjdump -sass``) and the size of every hot loop: the instructions
from a backward branch's target to the branch, innermost first (the self-branch after ``EXIT`` is not a
loop).  The last line is the geometric mean of the cubepy/nvcc SASS ratios.

A checked cubepy kernel is set against a twin with the same guards written out (``sgemm16_checked``,
``wmma_tile_checked``: a global read past the buffer's length gives 0, a write past it is dropped), so
the row compares code that does the same work; the unchecked SGEMM row shows what checking costs.

Unrolling is decided the same way on both sides: where a twin keeps a loop rolled with ``#pragma unroll 1``,
the cubepy kernel says ``cp.range(..., unroll=1)`` (PTX ``.pragma "nounroll"``); otherwise ptxas would
unroll one side only and the static counts would compare different loops.  The TMA round trip and the
conv weight gradient are the example's and the library's own kernels: the round trip carries no hint, and
the weight gradient's epilogue loop is rolled in the library itself (``unroll=1``: LLVM unrolled it 4x
once its bounds became by-value parameters, for 38 registers instead of 29).

``--modes`` prints another table: each cubepy kernel compiled checked and unchecked, its SASS and hot loops
in both modes and the largest checked/unchecked hot-loop ratio (what checked mode costs where it matters).
A checked kernel may list more loops: a loop split for its buffer accesses (``cubepy.ir.versioning``) keeps
its checked rest, which runs no iteration when every access is in range; each unchecked loop is then set
against the closest checked one.

Options: ``--only NAME`` (substring of a case name, repeatable), ``--no-contract`` (compile the cubepy
side with ``contract=False``), ``--modes``, ``--json PATH``.  Needs ``nvcc`` and ``cuobjdump`` (the
``nvidia-cuda-cuobjdump`` wheel, in the ``bench`` extra); without them it says why and exits 0.
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CUDA_DIR = Path(__file__).resolve().parent / "cuda"
NVCC_FLAGS = ("-arch=sm_90a", "-O3", "-cubin")

_INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_BRANCH_TARGET = re.compile(r"\b(?:BRA|JMP)\b[^`]*?`?\(?0x([0-9a-f]+)")
_RESOURCE = re.compile(r"Function (\S+):\s*\n\s*REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)")


def find_cuda_tool(name: str) -> str | None:
    """``name`` (cuobjdump, nvdisasm, nvcc) on PATH, in a toolkit root, or in an ``nvidia-cuda-*`` wheel."""
    on_path = shutil.which(name)
    if on_path:
        return on_path
    roots = [Path(os.environ[v]) for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    roots.append(Path("/usr/local/cuda"))
    for entry in sys.path:
        nvidia = Path(entry or ".") / "nvidia"
        if nvidia.is_dir():
            roots.extend(sorted(p for p in nvidia.iterdir() if p.is_dir()))
    for root in roots:
        candidate = root / "bin" / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


@dataclass
class Sass:
    """What one cubin's kernel uses and how long its code and its loops are."""

    registers: int
    shared: int
    stack: int
    local: int
    instructions: int
    loops: list[int]
    mma_loops: list[int] = field(default_factory=list)  # the loops that issue tensor-core instructions


def sass_of(cubin: bytes, entry: str, cuobjdump: str) -> Sass:
    """Resources, instruction count (no NOPs) and loop sizes of ``entry`` in ``cubin``."""
    with tempfile.TemporaryDirectory(prefix="cubepy-sass-") as tmp:
        path = Path(tmp) / "k.cubin"
        path.write_bytes(cubin)
        usage = subprocess.run(
            [cuobjdump, "--dump-resource-usage", str(path)], capture_output=True, text=True, check=True
        ).stdout
        sass = subprocess.run(
            [cuobjdump, "-sass", "-fun", entry, str(path)], capture_output=True, text=True, check=True
        ).stdout
    found = {m[0]: m for m in _RESOURCE.findall(usage)}
    _, reg, stack, shared, local = found.get(entry) or next(iter(found.values()))
    return Sass(int(reg), int(shared), int(stack), int(local), *_count(sass))


_TENSOR_CORE = re.compile(r"^(@\S+\s+)?(HMMA|[HQ]GMMA|IMMA)\b")


def _count(sass: str) -> tuple[int, list[int], list[int]]:
    """(instructions without NOPs, loop sizes innermost first, sizes of the loops that issue tensor-core
    instructions) of one function's ``cuobjdump -sass``."""
    real, loops = loop_bodies(sass)
    sizes = sorted(len(body) for body in loops)
    mma = sorted(len(body) for body in loops if any(_TENSOR_CORE.match(t) for t in body))
    return len(real), sizes, mma


def loop_bodies(sass: str) -> tuple[list[str], list[list[str]]]:
    """The instructions of one function's ``cuobjdump -sass`` without NOPs, and each loop's instructions (from
    a backward branch's target to the branch), in program order.

    A backward branch is a loop only when its target dominates it (every path from the entry to the branch
    passes the target) and control can get from the target back to it: ptxas puts slow paths (an mbarrier
    wait's retry) after the kernel's end and jumps back into the main line, and that jump is not a loop, even
    when an enclosing loop leads from its target back to the wait."""
    listing = [(int(addr, 16), text) for addr, text in _INSTRUCTION.findall(sass)]
    real = [(addr, text) for addr, text in listing if not text.startswith("NOP")]
    index_of = {addr: i for i, (addr, _) in enumerate(real)}

    def at_or_after(target: int, default: int) -> int:
        found = index_of.get(target)
        if found is None:  # the target is a NOP: the next real instruction
            found = next((j for j, (a, _) in enumerate(real) if a > target), default)
        return found

    def successors(i: int) -> list[int]:
        text = real[i][1]
        predicated = text.startswith("@")
        match = _BRANCH_TARGET.search(text)
        following = [i + 1] if i + 1 < len(real) else []
        if match is not None:
            return [at_or_after(int(match.group(1), 16), i), *(following if predicated else [])]
        if re.match(r"(@\S+\s+)?EXIT\b", text) and not predicated:
            return []
        return following

    def reaches(start: int, goal: int, avoiding: int | None = None) -> bool:
        seen, stack = {start}, [start]
        while stack:
            i = stack.pop()
            if i == goal:
                return True
            for j in successors(i):
                if j not in seen and j != avoiding:
                    seen.add(j)
                    stack.append(j)
        return False

    loops = []
    for i, (addr, text) in enumerate(real):
        match = _BRANCH_TARGET.search(text)
        if match is None:
            continue
        target = int(match.group(1), 16)
        if target >= addr:
            continue
        start = at_or_after(target, i)
        if reaches(start, i) and (start == 0 or not reaches(0, i, avoiding=start)):
            loops.append([t for _, t in real[start : i + 1]])
    return [t for _, t in real], loops


def compile_cuda(source: Path, nvcc: str) -> bytes:
    """``nvcc -arch=sm_90a -O3 -cubin`` of one twin."""
    with tempfile.TemporaryDirectory(prefix="cubepy-nvcc-") as tmp:
        out = Path(tmp) / "k.cubin"
        subprocess.run(
            [nvcc, *NVCC_FLAGS, f"-I{CUDA_DIR}", str(source), "-o", str(out)],
            check=True,
            capture_output=True,
            text=True,
        )
        return out.read_bytes()


def missing_tools() -> str | None:
    """Why the benchmark cannot run here, or None."""
    if find_cuda_tool("nvcc") is None:
        return "nvcc not found (PATH, CUDA_HOME, /usr/local/cuda): the CUDA twins cannot be compiled"
    if find_cuda_tool("cuobjdump") is None:
        return "cuobjdump not found: pip install nvidia-cuda-cuobjdump (the bench extra)"
    from cubepy.compiler import ptxas

    if not ptxas.available():
        return ptxas.unavailable_reason()
    return None


def compare(only: tuple[str, ...] = (), contract: bool | None = None) -> list[dict]:
    """One row per case: the cubepy and nvcc ``Sass`` and the ratio of their instruction counts."""
    from benchmarks.sass_kernels import CASES

    nvcc, cuobjdump = find_cuda_tool("nvcc"), find_cuda_tool("cuobjdump")
    rows = []
    for case in CASES:
        if only and not any(o.lower() in case.name.lower() for o in only):
            continue
        options = {} if contract is None else {"contract": contract}
        compiled = case.compile(**options)
        mine = sass_of(compiled.cubin, compiled.name, cuobjdump)
        theirs = sass_of(compile_cuda(CUDA_DIR / case.cuda_file, nvcc), case.cuda_entry, cuobjdump)
        rows.append(
            {
                "name": case.name,
                "checked": case.checked,
                "cubepy": asdict(mine),
                "nvcc": asdict(theirs),
                "ratio": mine.instructions / theirs.instructions,
            }
        )
    return rows


def compare_modes(only: tuple[str, ...] = (), contract: bool | None = None) -> list[dict]:
    """One row per case: its cubepy kernel compiled checked and unchecked, and how far the hot loops differ."""
    from benchmarks.sass_kernels import CASES

    cuobjdump = find_cuda_tool("cuobjdump")
    rows = []
    for case in CASES:
        if only and not any(o.lower() in case.name.lower() for o in only):
            continue
        options = {} if contract is None else {"contract": contract}
        both = {}
        for mode, unchecked in (("checked", False), ("unchecked", True)):
            compiled = case.compile(unchecked=unchecked, **options)
            both[mode] = asdict(sass_of(compiled.cubin, compiled.name, cuobjdump))
        rows.append({"name": case.name, **both, "loop_ratio": _loop_ratio(both["checked"], both["unchecked"])})
    return rows


def _loop_ratio(checked: dict, unchecked: dict) -> float:
    """The largest checked/unchecked size over the hot loops (the whole kernel's when either has no loop).

    Loops pair up innermost first.  The checked kernel may hold more loops (a split loop's checked rest, which
    runs only when an access can miss): then each unchecked loop is set against the closest checked loop not
    yet taken.
    """
    a, b = sorted(checked["loops"]), sorted(unchecked["loops"])
    if not a or not b or len(a) < len(b):
        return sum(a or [checked["instructions"]]) / sum(b or [unchecked["instructions"]])
    if len(a) == len(b):
        return max(x / y for x, y in zip(a, b, strict=True))
    free, worst = list(a), 0.0
    for size in b:
        match = min(free, key=lambda c: abs(c - size))
        free.remove(match)
        worst = max(worst, match / size)
    return worst


def format_modes(rows: list[dict]) -> str:
    """The checked-versus-unchecked table as Markdown."""
    lines = [
        "| kernel | regs checked / unchecked | SASS checked / unchecked | hot loops checked / unchecked | loop ratio |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        a, b = row["checked"], row["unchecked"]
        lines.append(
            f"| {row['name']} | {a['registers']} / {b['registers']} | {a['instructions']} / {b['instructions']} | "
            f"{_loops(a['loops'])} / {_loops(b['loops'])} | {row['loop_ratio']:.2f} |"
        )
    worst = max((r["loop_ratio"] for r in rows), default=1.0)
    lines.append(f"\nLargest checked/unchecked hot-loop ratio over {len(rows)} kernels: **{worst:.3f}**")
    return "\n".join(lines)


def geometric_mean(values: list[float]) -> float:
    """The geometric mean (1.0 for none)."""
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else 1.0


def format_table(rows: list[dict]) -> str:
    """The side-by-side table as Markdown."""
    lines = [
        "| kernel | regs cubepy / nvcc | smem | spill/local | SASS cubepy / nvcc | ratio | hot loops cubepy / nvcc |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        a, b = row["cubepy"], row["nvcc"]
        loops = f"{_loops(a['loops'])} / {_loops(b['loops'])}"
        lines.append(
            f"| {row['name']}{' (checked)' if row['checked'] and 'checked' not in row['name'] else ''} | "
            f"{a['registers']} / {b['registers']} | {a['shared']} / {b['shared']} | "
            f"{a['local']}+{a['stack']} / {b['local']}+{b['stack']} | {a['instructions']} / "
            f"{b['instructions']} | {row['ratio']:.2f} | {loops} |"
        )
    lines.append(
        f"\nGeometric mean of the SASS ratio cubepy/nvcc over {len(rows)} kernels: "
        f"**{geometric_mean([r['ratio'] for r in rows]):.3f}**"
    )
    return "\n".join(lines)


def _loops(sizes: list[int]) -> str:
    return ",".join(map(str, sizes)) if sizes else "-"


def main(argv: list[str] | None = None) -> int:
    """Print the table (and write it as JSON with ``--json``)."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.sass",
        description=inspect.getdoc(sys.modules[__name__]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--only", action="append", default=[], help="substring of a case name (repeatable)")
    parser.add_argument("--no-contract", action="store_true", help="compile cubepy's side with contract=False")
    parser.add_argument("--json", help="also write the rows as JSON here")
    parser.add_argument(
        "--modes", action="store_true", help="compare each cubepy kernel checked against unchecked instead of nvcc"
    )
    args = parser.parse_args(argv)
    reason = missing_tools()
    if reason:
        print(f"benchmarks.sass skipped: {reason}")
        return 0
    contract = False if args.no_contract else None
    if args.modes:
        rows = compare_modes(tuple(args.only), contract)
        print(format_modes(rows))
    else:
        rows = compare(tuple(args.only), contract)
        print(format_table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
