"""``SliceLayout``: a window ``[offset, offset + size)`` of a layout's coordinates (CubeCL's ``SliceLayout``).

``View.slice`` builds one inside kernels from runtime coordinates; as a kernel argument its offset and
size are u32 coordinates of a comptime rank.
"""

from __future__ import annotations

import attrs
import numpy as np

import cubepy as cp
from cubepy import cube, u32
from cubepy_layouts.coords import coords_add, coords_in_bounds
from cubepy_layouts.layout import Layout


@attrs.frozen
class SliceCompilationArg:
    """What a launched ``SliceLayout`` compiles against: the rank and whether it checks bounds."""

    rank: int
    checked: bool


class SliceLayout(Layout):
    """``pos -> offset + pos``; when ``checked``, in bounds only below ``size``; shape ``size``."""

    def __init__(self, offset, size, checked: bool = True) -> None:
        self.offset = offset
        self.size = size
        self.checked = checked

    @cube
    def to_source_pos(self, pos):
        """``offset + pos``."""
        return coords_add(self.offset, pos)

    @cube
    def is_in_bounds(self, pos):
        """``pos < size`` element-wise when checked, else ``true`` (the wrapped layout still checks)."""
        if cp.comptime(self.checked):
            return coords_in_bounds(pos, self.size)
        return cp.runtime(True)

    @cube
    def shape(self):
        """``size``."""
        return self.size

    class Launch:
        """The runtime argument: offset and size (tuples of ints), and the comptime ``checked`` flag."""

        def __init__(self, offset: tuple[int, ...], size: tuple[int, ...], checked: bool = True) -> None:
            if len(offset) != len(size):
                raise cp.LaunchError(f"SliceLayout offset {offset} and size {size} differ in rank")
            self.offset, self.size, self.checked = tuple(offset), tuple(size), checked

    RuntimeArg = Launch
    CompilationArg = SliceCompilationArg

    @classmethod
    def compilation_arg(cls, runtime_arg: SliceLayout.Launch) -> SliceCompilationArg:
        """The rank and the checked flag."""
        if not isinstance(runtime_arg, cls.Launch):
            raise cp.LaunchError(f"expected SliceLayout.Launch(...), got {type(runtime_arg).__name__}")
        return SliceCompilationArg(len(runtime_arg.offset), bool(runtime_arg.checked))

    @classmethod
    def register(cls, runtime_arg: SliceLayout.Launch, bindings) -> None:
        """Bind the offset, then the size, as u32 scalars."""
        for value in runtime_arg.offset + runtime_arg.size:
            bindings.add_scalar(np.uint32(value))

    @classmethod
    def expand(cls, comp_arg: SliceCompilationArg, builder) -> SliceLayout:
        """Declare ``2 * rank`` u32 scalars and build the layout from them."""

        def scalar(name: str):
            with builder.naming(name):
                return cp.ExpandElement(builder.register("scalar", cp.ir.Type(u32.ir)), builder.state)

        offset = tuple(scalar(f"offset{i}") for i in range(comp_arg.rank))
        size = tuple(scalar(f"size{i}") for i in range(comp_arg.rank))
        if comp_arg.rank == 1:
            offset, size = offset[0], size[0]
        return cls(offset, size, comp_arg.checked)

    expand_output = expand


SliceLayout.ExpandType = SliceLayout
SliceLayout.Launch.__layout_type__ = SliceLayout
SliceCompilationArg.__launch_type__ = SliceLayout
