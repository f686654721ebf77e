"""Helpers shared by the loop-fission tests (``test_host_fission*.py``)."""

from __future__ import annotations

import cubepy as cp

RUNTIMES = ("interp", "cpu")


def _definition(kernel, cube_dim, *args):
    """The kernel's definition as ``kernel.compile`` builds it for these compilation arguments."""
    return kernel.compile(cube_dim, *args).definition


def _arrays(*elems):
    """Array compilation arguments of the given element types (line size 1)."""
    return tuple(cp.BufferCompilationArg(elem, 1) for elem in elems)
