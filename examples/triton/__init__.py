"""cubepy versions of Triton's nine tutorials, written in cubepy's own style.

Each module ``tNN_<name>.py`` holds the kernels, a ``run(client, ...)`` that launches them at a ragged size and
returns the largest error against numpy, and ``SASS_CASES``: what ``python -m benchmarks.triton_tutorials``
compiles to set beside Triton's own kernel for the same tutorial.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SassCase:
    """One cubepy kernel to compare with Triton's: how to compile it and which of its SASS to count.

    ``build(**options)`` returns a ``CompiledKernel`` for ``target`` (``options`` are ``kernel.compile`` options,
    e.g. ``unchecked=True``); ``measure`` is ``"kernel"`` (the whole kernel), ``"loop"`` (its largest hot loop) or
    ``"mma_loop"`` (its smallest loop issuing tensor-core instructions: the main loop of a kernel that runs its
    masked tail blocks in a loop of their own);
    ``triton`` names the Triton kernel of ``benchmarks.triton_tutorial_kernels`` it is set against;
    ``triton_ragged``: the cubepy kernel is the one written for any size (items one at a time), so it is set
    against Triton's kernel compiled for a size not a multiple of 16, whose accesses are one item wide too (and
    the table also gives Triton at the tutorial's size, whose accesses are 16 bytes wide).
    """

    tutorial: str  # e.g. "02 fused softmax"
    label: str  # e.g. "softmax, 1 row per cube"
    build: Callable[..., Any]
    triton: str
    target: str = "sm_90a"
    measure: str = "kernel"
    triton_ragged: bool = False
