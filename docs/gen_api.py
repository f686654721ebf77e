"""Regenerate docs/api/cubepy.md from ``cubepy.__all__`` (run from the repository root: ``python docs/gen_api.py``)."""

import cubepy
from cubepy.frontend import _intrinsics

starts = {
    "cube": "Decorators, kernels and protocols",
    "f16": "Element types and type parameters",
    "Array": "Memories and containers",
    "ABSOLUTE_POS": "Builtins, barriers and plane operations",
    "Barrier": "TMA and asynchronous barriers",
    "cmma": "Tensor cores",
    _intrinsics.RECORD_FUNCTIONS[0]: "Math, control markers and debugging",
    "randint": "Random numbers",
    "wgmma_a_position": "Warpgroup MMA (sm_90a)",
    "ExpandElement": "Expansion internals (intrinsic authors, tests)",
    "ArrayArg": "Runtimes, launches and errors",
}
out = [
    "# cubepy",
    "",
    "Every name of `cubepy.__all__`, generated from the docstrings, in the order of `__all__`. Import it as",
    "`import cubepy as cp`. Private and special members (`_x`, `__x__`) are left out; the guides show how",
    "the pieces fit together.",
    "",
]
for n in cubepy.__all__:
    if n in starts:
        out += [f"## {starts[n]}", ""]
    out += [f"::: cubepy.{n}", ""]
open("docs/api/cubepy.md", "w").write("\n".join(out).rstrip() + "\n")
