"""Run one layout method on the interp runtime for a batch of coordinates (one unit per coordinate)."""

import functools

import numpy as np

import cubepy as cp
from cubepy import ABSOLUTE_POS, Array, cube, i64


def flatten(value) -> list:
    """The leaves of a nested tuple, in order."""
    if isinstance(value, tuple):
        return [leaf for item in value for leaf in flatten(item)]
    return [value]


@functools.cache
def evaluator(layout_type, method: str, coord_spec, n_out: int):
    """A kernel that writes ``layout.<method>(coords[unit])`` (flattened, as i64) to ``out[unit]``."""
    specs = coord_spec if isinstance(coord_spec, tuple) else (coord_spec,)
    rank = len(specs)

    @cube(launch=True)
    def evaluate(coords: Array[i64], out: Array[i64], layout: layout_type, count: cp.u32):
        if ABSOLUTE_POS < count:
            values = tuple(specs[i](coords[ABSOLUTE_POS * rank + i]) for i in range(rank))
            pos = values if cp.comptime(isinstance(coord_spec, tuple)) else values[0]
            result = getattr(layout, method)() if cp.comptime(method == "shape") else getattr(layout, method)(pos)
            leaves = flatten(result)
            for i in cp.unroll(range(n_out)):
                out[ABSOLUTE_POS * n_out + i] = (
                    i64(cp.select(leaves[i], 1, 0)) if cp.comptime(_is_bool(leaves[i])) else i64(leaves[i])
                )

    return evaluate


def _is_bool(value) -> bool:
    if isinstance(value, bool):
        return True
    var = getattr(value, "var", None)
    return var is not None and str(var.type) == "bool"


def run_layout(layout_type, launch, method: str, coords, coord_spec, n_out: int) -> np.ndarray:
    """``layout.<method>`` at each row of ``coords``: an array ``(len(coords), n_out)``."""
    client = cp.client("interp")
    coords = np.asarray(coords, dtype=np.int64).reshape(len(coords), -1)
    out = client.zeros((len(coords) * n_out,), np.int64)
    kernel = evaluator(layout_type, method, coord_spec, n_out)
    kernel.launch(
        client,
        cp.CubeCount(1),
        cp.CubeDim(max(len(coords), 1)),
        cp.ArrayArg(client.create(coords.ravel())),
        cp.ArrayArg(out),
        launch,
        len(coords),
    )
    return client.read(out).reshape(len(coords), n_out)
