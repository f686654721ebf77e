"""The topology builtins (``unit_pos``, ``cube_pos``, ``absolute_pos`` ...) computed from special registers.

Builtins follow CubeCL's formulas on the PTX special registers; ``cube_dim`` is the kernel's static
cube_dim (the entry carries ``.reqntid``, so a launch with another block shape fails).
``absolute_pos = abs_z*GX*GY + abs_y*GX + abs_x`` with ``GX = cube_count_x * cube_dim_x`` (for a cube of one
row of units the same value written ``cube_pos * cube_dim_x + unit_pos_x``); planes are 32
units; ``unit_pos_plane`` is ``%laneid`` and ``plane_pos = unit_pos / 32``.  The entry block reads each
builtin a kernel uses once (``KernelLowering``); a target supplies the registers (``special_register``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import llvmlite.ir as ir

from cubepy.compiler import llvm_types as lt
from cubepy.errors import CompileError
from cubepy.ir.variable import PLANE_WIDTH

if TYPE_CHECKING:
    from cubepy.compiler.lower import KernelLowering


def sreg(lw: KernelLowering, name: str) -> ir.Value:
    """Read the PTX special register ``%name`` (``tid.x``, ``laneid``) as i32 (the target provides it)."""
    return lw.target.special_register(lw, name)


def read_builtin(lw: KernelLowering, name: str) -> ir.Value:
    """The value of the topology builtin ``name`` (u32)."""
    b = lw.builder
    dims = dict(zip("xyz", lw.definition.cube_dim))

    def const(value: int) -> ir.Value:
        return ir.Constant(lt.I32, value)

    def mul(x: ir.Value, y: ir.Value) -> ir.Value:  # skips "* 1" so the unoptimized text stays readable
        if isinstance(y, ir.Constant) and y.constant == 1:
            return x
        if isinstance(x, ir.Constant) and x.constant == 1:
            return y
        return b.mul(x, y)

    def flat(x: ir.Value, y: ir.Value, z: ir.Value, size_x: ir.Value, size_y: ir.Value) -> ir.Value:
        return b.add(b.add(mul(z, mul(size_x, size_y)), mul(y, size_x)), x)

    def absolute(axis: str) -> ir.Value:
        return b.add(mul(sreg(lw, f"ctaid.{axis}"), const(dims[axis])), sreg(lw, f"tid.{axis}"))

    if name.startswith(("cube_pos_cluster", "cube_cluster_dim")):
        axis = name[-1] if name[-2] == "_" else ""
        register = ("cluster_ctaid" if axis else "cluster_ctarank") if "pos" in name else "cluster_nctaid"
        if not axis and "dim" in name:
            register = "cluster_nctarank"
        return sreg(lw, register.replace("_", ".") + (f".{axis}" if axis else ""))
    base, _, axis = name.rpartition("_")
    if axis in ("x", "y", "z"):
        if base == "unit_pos":
            return sreg(lw, f"tid.{axis}")
        if base == "cube_pos":
            return sreg(lw, f"ctaid.{axis}")
        if base == "cube_dim":
            return const(dims[axis])
        if base == "cube_count":
            return sreg(lw, f"nctaid.{axis}")
        if base == "absolute_pos":
            return absolute(axis)
    if name == "unit_pos":
        return flat(*(sreg(lw, f"tid.{a}") for a in "xyz"), const(dims["x"]), const(dims["y"]))  # type: ignore[call-arg]  # x, y, z
    if name == "cube_pos":
        return flat(*(sreg(lw, f"ctaid.{a}") for a in "xyz"), sreg(lw, "nctaid.x"), sreg(lw, "nctaid.y"))  # type: ignore[call-arg]  # x, y, z
    if name == "cube_dim":
        return const(dims["x"] * dims["y"] * dims["z"])
    if name == "cube_count":
        return mul(mul(sreg(lw, "nctaid.x"), sreg(lw, "nctaid.y")), sreg(lw, "nctaid.z"))
    if name == "absolute_pos":
        if dims["y"] == dims["z"] == 1:
            # The same value (mod 2**32) as the general formula below, written ``cube_pos * cube_dim_x +
            # unit_pos_x``: a sum whose low bits are the unit's own, so a target that runs the units in a loop
            # (the host's loop fission) sees consecutive units address consecutive items.
            return b.add(mul(read_builtin(lw, "cube_pos"), const(dims["x"])), sreg(lw, "tid.x"))
        grid_x = mul(sreg(lw, "nctaid.x"), const(dims["x"]))
        grid_y = mul(sreg(lw, "nctaid.y"), const(dims["y"]))
        return flat(absolute("x"), absolute("y"), absolute("z"), grid_x, grid_y)
    if name == "plane_dim":
        return const(PLANE_WIDTH)
    if name == "unit_pos_plane":
        return sreg(lw, "laneid")
    if name == "plane_pos":
        unit_pos = flat(*(sreg(lw, f"tid.{a}") for a in "xyz"), const(dims["x"]), const(dims["y"]))  # type: ignore[call-arg]  # x, y, z
        return b.udiv(unit_pos, const(PLANE_WIDTH))
    raise CompileError(f"unknown builtin {name!r}")
