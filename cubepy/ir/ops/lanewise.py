"""What a lane-wise operation computes: the ``Semantics`` an ``OpRecord`` carries.

One numpy function per element kind of the first operand.  The interp runs it, ``fold_constants`` and the
frontend's comptime fold call it (through :func:`cubepy.ir.semantics.evaluate`), so there is one definition
of what an operation computes.  The compiled back ends implement the same; their math library calls are
named by the record too (``OpRecord.libdevice``, ``OpRecord.c_library``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import attrs

if TYPE_CHECKING:
    from cubepy.ir.types import ElemType

Fn = Callable[..., Any]
# "once": a float function receives its operands in the compute type (f32 for f16/bf16) and its result is
# rounded once to the type; "own": it receives the operands' own type and returns its own result type.
Rounding = Literal["once", "own"]


@attrs.frozen
class Semantics:
    """What a lane-wise operation computes on numpy values, by the element kind of its first operand."""

    on_float: Fn | None = None
    on_int: Fn | None = None
    on_bool: Fn | None = None
    rounding: Rounding = "once"
    result_dtype: bool = False  # the function also receives the result's numpy dtype (a conversion)

    def function(self, elem: ElemType) -> Fn | None:
        """The function for operands of ``elem`` (None: the operation does not take that kind)."""
        if elem.is_bool:
            return self.on_bool
        if elem.is_float:
            return self.on_float
        return self.on_int

    @classmethod
    def numbers(cls, on_float: Fn, on_int: Fn | None = None, rounding: Rounding = "once") -> Semantics:
        """Float and integer operands (``on_int`` defaults to the float function)."""
        return cls(on_float, on_int if on_int is not None else on_float, rounding=rounding)
