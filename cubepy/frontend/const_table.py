"""``cp.const_array(table)``: a numpy table captured from Python, read in a kernel from constant memory.

numba's ``cuda.const.array_like(TABLE)``.  The table's values become part of the kernel (an IR
``ConstTable``: PTX ``.const`` data read with ``ld.const`` on a GPU, a read-only array in the interp),
so any index works, runtime ones included.  The values are taken when the kernel is expanded; the
kernel's identity hashes the arrays its source names, so a table with other values is another kernel.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cubepy import ir
from cubepy.frontend import source
from cubepy.frontend.containers import MemoryExpand
from cubepy.frontend.state import require_state
from cubepy.frontend.values import ExpandBase
from cubepy.ir.types import ALL_ELEM_TYPES, elem_of_numpy

_SUPPORTED_DTYPES = ", ".join(sorted({e.numpy_name for e in ALL_ELEM_TYPES}))


class ConstArrayExpand(MemoryExpand):
    """A constant table inside a kernel: ``t[i]`` (``t[i, j]`` row-major for a 2-D table), ``t.len()``, ``t.shape``."""

    __slots__ = ("table_shape",)

    def __init__(self, var: ir.Variable, shape: tuple[int, ...]) -> None:
        super().__init__(var, False, shape if len(shape) > 1 else None)
        self.table_shape = shape

    @property
    def shape(self) -> tuple[int, ...]:
        """The numpy shape of the table (comptime ints)."""
        return self.table_shape

    def __setitem__(self, index: Any, value: Any) -> None:
        source.fail(
            f"{self.describe()} is read-only: cp.const_array tables live in constant memory; copy the values "
            "into a LocalArray or SharedMemory to change them"
        )

    def _flat_index(self, index: tuple[Any, ...]) -> object:
        if self.dims is None:
            source.fail(f"{self.describe()} is one-dimensional (shape {self.table_shape}): index it with one index")
        return super()._flat_index(index)


def const_array(table: Any) -> ConstArrayExpand:
    """A read-only kernel value holding the numpy array ``table``, indexable with runtime indices.

    Call it inside a kernel or ``@cube`` function on an array captured from Python (a module constant or
    a closure value): ``tbl = cp.const_array(TABLE)``, then ``tbl[i]``.  The element type follows the
    dtype; a kernel's tables share CUDA's 64 KiB constant bank.
    """
    state = require_state("cp.const_array")
    if not isinstance(table, np.ndarray):
        if isinstance(table, (MemoryExpand, ExpandBase)):
            what = "a kernel value (a buffer argument, a memory or a runtime value)"
            hint = "index buffers and memories directly; cp.const_array takes tables captured from Python"
        else:
            what = f"a {type(table).__name__}"
            hint = "make it a numpy array first, e.g. np.array(values, dtype=np.float32), at module level"
        source.fail(f"cp.const_array takes a numpy array captured from Python, got {what}; {hint}")
    elem = elem_of_numpy(table.dtype)
    if elem is None:
        source.fail(
            f"cp.const_array: a table of dtype {table.dtype} has no cubepy element type; "
            f"convert it with .astype(...) to one of: {_SUPPORTED_DTYPES} (native byte order)"
        )
    if table.ndim == 0:
        source.fail("cp.const_array: a 0-d array is one value, not a table; use the value itself (a comptime number)")
    if table.size == 0:
        source.fail(
            f"cp.const_array: the table is empty (shape {table.shape}); a constant table needs one value or more"
        )
    nbytes = table.size * elem.size
    used = sum(t.nbytes for t in state.const_tables.values())
    data = np.ascontiguousarray(table).tobytes()
    if (elem, data) not in state.const_tables and used + nbytes > ir.MAX_CONST_BYTES:
        earlier = f" (with the kernel's other tables, {used + nbytes} bytes)" if used else ""
        source.fail(
            f"cp.const_array: a table of {table.size} {elem.name} values is {nbytes} bytes{earlier}, more than "
            f"CUDA's {ir.MAX_CONST_BYTES}-byte constant bank; pass large tables as Array arguments"
        )
    flat = table.ravel()
    values = tuple((flat.astype(np.float64) if elem.is_float else flat).tolist())
    return ConstArrayExpand(state.declare_const_table(elem, values, data), tuple(int(n) for n in table.shape))
