"""What isolating LLVM costs a compile, by resident size: a forked child per compile against the compile server.

For each size the script first holds that many GiB of touched numpy memory (a user's arrays), then compiles
fresh vector-add definitions to PTX (no ptxas) with each isolation in turn, alternating: ``fork`` (the forked
child, ``run_isolated``) and ``server`` (``cubepy.compiler.llvm_server``).  It prints the median of the stage
that runs in the other process (``llvm_opt+emit``: the round trip and the child's link, O3 and emission) and of
the whole compile.

Run: ``python -m benchmarks.compile_isolation [--sizes 0,1,4] [--repeats 15]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from cubepy.cli import default_compilation_args  # noqa: E402
from cubepy.compiler import llvm_server  # noqa: E402
from cubepy.compiler.compiled import compile_definition  # noqa: E402
from examples.vector_add import vector_add  # noqa: E402


def _sample(isolation: str) -> tuple[float, float]:
    if isolation == "fork":
        llvm_server._unavailable, llvm_server._server, kept = "benchmark: fork", None, llvm_server._server
    try:
        definition = vector_add.define(tuple(default_compilation_args(vector_add, {})), (256, 1, 1), True)
        timings = compile_definition(definition, "sm_90a", assemble=False).timings
    finally:
        if isolation == "fork":
            llvm_server._unavailable, llvm_server._server = None, kept
    return timings["llvm_opt+emit"], sum(v for k, v in timings.items() if not k.startswith("child_"))


def measure(sizes: list[float], repeats: int) -> list[dict]:
    """Median seconds per isolation and resident size."""
    llvm_server.start()
    held: list[np.ndarray] = []
    rows = []
    for gib in sizes:
        while sum(a.nbytes for a in held) < gib * 2**30:
            held.append(np.ones(2**27, np.uint8))  # 128 MiB, every page touched
        samples: dict[str, list[tuple[float, float]]] = {"fork": [], "server": []}
        for _ in range(repeats):
            for isolation in samples:
                samples[isolation].append(_sample(isolation))
        rows.append(
            {
                "gib": gib,
                **{
                    f"{isolation} {part}": statistics.median(s[i] for s in found) * 1e3
                    for isolation, found in samples.items()
                    for i, part in enumerate(("llvm ms", "compile ms"))
                },
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="0,1,4", help="GiB held before measuring, comma-separated")
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args(argv)
    rows = measure([float(s) for s in args.sizes.split(",")], args.repeats)
    keys = list(rows[0])
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for row in rows:
        print("| " + " | ".join(f"{row[k]:.1f}" for k in keys) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
