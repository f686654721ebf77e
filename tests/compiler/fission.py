"""Helpers shared by the host target's tests (loop fission, row guards, frame locals)."""

from __future__ import annotations

import cubepy as cp

RUNTIMES = ("interp", "cpu")


def _definition(kernel, cube_dim, *args):
    """The kernel's definition as ``kernel.compile`` builds it for these compilation arguments."""
    return kernel.compile(cube_dim, *args).definition


def on_interp_and_cpu(launch, make):
    """``launch(client, *make(client))`` on the interp and on the cpu runtime: per runtime, in that order, the
    contents of the handles ``make`` created, read back afterwards."""
    results = []
    for runtime in RUNTIMES:
        client = cp.client(runtime)
        handles = make(client)
        launch(client, *handles)
        results.append([client.read(h) for h in handles])
    return results


def _arrays(*elems):
    """Array compilation arguments of the given element types (line size 1)."""
    return tuple(cp.BufferCompilationArg(elem, 1) for elem in elems)
