"""How the interp stores values: numpy dtypes of IR types, lane masks, locals, literals and builtins.

A value of a scalar type is either a lane array of shape ``(lanes,)`` or a *uniform* value (a 0-d
array or numpy scalar, the same for every lane); a value of a line type of ``L`` lanes is either
``(lanes, L)`` or uniform ``(L,)``.  Literals, scalar parameters and lane-independent builtins stay
uniform, and numpy broadcasting spreads them only where an operation needs it.  Values are never
modified in place once stored, so one array may back several variables.
"""

from __future__ import annotations

from typing import cast

import numpy as np

from cubepy.ir import Type, Variable, VarKind
from cubepy.ir.types import ElemType
from cubepy.ir.variable import PLANE_WIDTH

U32 = np.dtype(np.uint32)


def numpy_dtype(elem: ElemType) -> np.dtype:
    """The numpy dtype that stores ``elem``: ``elem.numpy``, kept as a name the interp's handlers import."""
    return elem.numpy


def wrap_int(value: int, elem: ElemType) -> int:
    """``value`` reduced modulo 2**bits into ``elem``'s range (two's complement for signed types)."""
    bits = elem.bits
    value &= (1 << bits) - 1
    if elem.kind == "int" and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


def literal(value: object, ty: Type) -> np.ndarray | np.generic:
    """A Python value as the uniform numpy value of item type ``ty`` (integers wrap into range)."""
    elem = ty.elem
    dtype = numpy_dtype(elem)
    if elem.is_int:
        value = wrap_int(int(value), elem)  # type: ignore[call-overload]
    elif elem.is_bool:
        value = bool(value)
    else:
        # Through f64 so that bf16 rounds once, directly from the literal.
        value = np.float64(cast(float, value)).astype(dtype)
    scalar = dtype.type(value)
    return scalar if ty.line == 1 else np.full(ty.line, scalar, dtype=dtype)


def is_uniform(value: np.ndarray | np.generic, ty: Type) -> bool:
    """Whether ``value`` of item type ``ty`` is one value for every lane (not a lane array)."""
    return np.ndim(value) == (0 if ty.line == 1 else 1)


def full_lanes(value: np.ndarray | np.generic, ty: Type, lanes: int) -> np.ndarray:
    """``value`` as a (read-only, possibly broadcast) lane array of ``lanes`` rows."""
    shape = (lanes,) if ty.line == 1 else (lanes, ty.line)
    return np.broadcast_to(value, shape)


def as_line_operand(value: np.ndarray | np.generic, ty: Type) -> np.ndarray | np.generic:
    """A scalar-typed operand shaped to broadcast against line values: lane arrays gain a unit axis."""
    if ty.line == 1 and np.ndim(value) == 1:
        return value[:, None]  # type: ignore[index]
    return value


class Mask:
    """The lanes of a chunk that execute an instruction: ``bits`` per lane, ``full`` when all do."""

    __slots__ = ("bits", "full", "any")

    def __init__(self, bits: np.ndarray, full: bool | None = None, any_: bool | None = None) -> None:
        self.bits = bits
        self.full = bool(bits.all()) if full is None else full
        self.any = self.full or (bool(bits.any()) if any_ is None else any_)

    @classmethod
    def all_lanes(cls, lanes: int) -> Mask:
        """Every lane active."""
        return cls(np.ones(lanes, dtype=bool), True, lanes > 0)

    def where(self, cond: np.ndarray | np.generic) -> Mask:
        """The lanes of this mask where the bool value ``cond`` holds (uniform or per lane)."""
        if np.ndim(cond) == 0:
            return self if cond else Mask(np.zeros_like(self.bits), False, False)
        bits = cond if self.full else self.bits & cond
        return Mask(cast(np.ndarray, bits))

    def without(self, lanes: np.ndarray) -> Mask:
        """This mask less the lanes set in ``lanes``."""
        return Mask(self.bits & ~lanes)

    def for_line(self) -> np.ndarray:
        """The bits shaped to broadcast against line values."""
        return self.bits[:, None]


class ValueStore:
    """The locals of one chunk, keyed by (kind, id), plus the uniform values of literals and parameters."""

    __slots__ = ("locals", "lanes", "uniforms")

    def __init__(self, lanes: int, uniforms: dict[int, np.ndarray | np.generic]) -> None:
        self.locals: dict[int, np.ndarray | np.generic] = {}
        self.lanes = lanes
        # id(variable) -> value for literals and scalar parameters, shared by every chunk of a launch.
        self.uniforms = uniforms

    @staticmethod
    def key(var: Variable) -> int:
        """The dictionary key of a local: const ids even, mutable ids odd."""
        return var.id * 2 + (var.kind is VarKind.MUT)

    def set(self, var: Variable, value: np.ndarray | np.generic) -> None:
        """Store ``value`` as the whole value of local ``var`` (no masking)."""
        self.locals[var.id * 2 + (var.kind is VarKind.MUT)] = value

    def write(self, var: Variable, value: np.ndarray | np.generic, mask: Mask) -> None:
        """Assign ``value`` to local ``var`` on the lanes of ``mask`` (other lanes of a mutable keep theirs)."""
        ty = var.type
        dtype = numpy_dtype(ty.elem)
        if value.dtype != dtype:
            value = value.astype(dtype)
        if ty.line > 1 and np.shape(value)[-1:] != (ty.line,):
            value = np.broadcast_to(value, (self.lanes, ty.line) if np.ndim(value) else (ty.line,))
        key = var.id * 2 + (var.kind is VarKind.MUT)
        if var.kind is VarKind.MUT and not mask.full:
            old = self.locals.get(key)
            if old is not None:
                bits = mask.bits if ty.line == 1 else mask.for_line()
                value = np.where(bits, value, old)
        self.locals[key] = value

    def write_merged(self, var: Variable, value: np.ndarray | np.generic, mask: Mask) -> None:
        """``write``, keeping the other lanes' values of immutable locals too.

        Used once groups may run one instruction at different times: each group's lanes get their own
        value of the same local.
        """
        ty = var.type
        dtype = numpy_dtype(ty.elem)
        if value.dtype != dtype:
            value = value.astype(dtype)
        if ty.line > 1 and np.shape(value)[-1:] != (ty.line,):
            value = np.broadcast_to(value, (self.lanes, ty.line) if np.ndim(value) else (ty.line,))
        key = var.id * 2 + (var.kind is VarKind.MUT)
        if not mask.full:
            old = self.locals.get(key)
            if old is not None:
                bits = mask.bits if ty.line == 1 else mask.for_line()
                value = np.where(bits, value, old)
        self.locals[key] = value

    def free(self, keys: tuple[int, ...]) -> None:
        """Drop the locals whose last use has passed."""
        for key in keys:
            self.locals.pop(key, None)


class Topology:
    """The builtins of one chunk of whole cubes, computed on first use with CubeCL's formulas."""

    def __init__(
        self,
        cube_dim: tuple[int, int, int],
        cube_count: tuple[int, int, int],
        first_cube: int,
        cubes: int,
        cluster: tuple[int, int, int] = (1, 1, 1),
    ) -> None:
        self.cube_dim = cube_dim
        self.cube_count = cube_count
        self.cluster = cluster
        self.first_cube = first_cube
        self.cubes = cubes
        self.units = cube_dim[0] * cube_dim[1] * cube_dim[2]
        self.lanes = cubes * self.units
        self.cache: dict[str, np.ndarray | np.generic] = {}

    def lane_of_cube(self) -> np.ndarray:
        """The chunk-relative cube index of every lane."""
        return np.repeat(np.arange(self.cubes, dtype=np.int64), self.units)

    def unit_pos_of(self, lane: int) -> tuple[int, int, int]:
        """(x, y, z) unit position of chunk lane ``lane``."""
        dx, dy, _ = self.cube_dim
        unit = int(lane) % self.units  # a Python int: reports print (0, 0, 0), not numpy's np.int64(0)
        return int(unit % dx), int((unit // dx) % dy), int(unit // (dx * dy))

    def cube_pos_of(self, lane: int) -> tuple[int, int, int]:
        """(x, y, z) cube position of chunk lane ``lane``."""
        cx, cy, _ = self.cube_count
        cube = int(self.first_cube + int(lane) // self.units)
        return int(cube % cx), int((cube // cx) % cy), int(cube // (cx * cy))

    def cluster_position(self) -> tuple[np.ndarray, np.ndarray]:
        """Per chunk cube: its rank in its cluster, and the chunk cube of its cluster's rank 0 (int64)."""
        (nx, ny, _), (cx, cy, cz) = self.cube_count, self.cluster
        cube = np.arange(self.first_cube, self.first_cube + self.cubes, dtype=np.int64)
        x, y, z = cube % nx, (cube // nx) % ny, cube // (nx * ny)
        rank = x % cx + (y % cy) * cx + (z % cz) * cx * cy
        leader = (z - z % cz) * nx * ny + (y - y % cy) * nx + (x - x % cx) - self.first_cube
        return rank, leader

    def peer_cube(self, cubes: np.ndarray, ranks: np.ndarray) -> np.ndarray:
        """The chunk cube at rank ``ranks`` of the cluster of each chunk cube of ``cubes`` (ranks in range)."""
        nx, ny, _ = self.cube_count
        cx, cy, _ = self.cluster
        _, leader = self.cluster_position()
        dx, dy, dz = ranks % cx, (ranks // cx) % cy, ranks // (cx * cy)
        return cast(np.ndarray, leader[cubes] + dx + dy * nx + dz * nx * ny)

    def get(self, name: str) -> np.ndarray | np.generic:
        """The u32 value of builtin ``name`` for every lane of the chunk."""
        value = self.cache.get(name)
        if value is None:
            value = self._compute(name)
            self.cache[name] = value
        return value

    def _compute(self, name: str) -> np.ndarray | np.generic:
        # Per-lane values are built by tiling and repeating small per-axis ranges (memory copies)
        # rather than by dividing lane ids; axes of extent 1 give uniform zeros.
        (dx, dy, dz), (cx, cy, cz) = self.cube_dim, self.cube_count
        uniform = {
            "cube_dim": dx * dy * dz,
            "cube_dim_x": dx,
            "cube_dim_y": dy,
            "cube_dim_z": dz,
            "cube_count": cx * cy * cz,
            "cube_count_x": cx,
            "cube_count_y": cy,
            "cube_count_z": cz,
            "plane_dim": PLANE_WIDTH,
            "cube_cluster_dim": self.cluster[0] * self.cluster[1] * self.cluster[2],
            "cube_cluster_dim_x": self.cluster[0],
            "cube_cluster_dim_y": self.cluster[1],
            "cube_cluster_dim_z": self.cluster[2],
        }
        if name in uniform:
            return cast(np.generic, np.uint32(uniform[name]))
        if name.startswith("cube_pos_cluster"):
            rank, _ = self.cluster_position()
            cx, cy, _ = self.cluster
            per_axis = {"": rank, "_x": rank % cx, "_y": (rank // cx) % cy, "_z": rank // (cx * cy)}
            return np.repeat(per_axis[name.removeprefix("cube_pos_cluster")].astype(np.uint32), self.units)
        get = self.get
        units, cubes = self.units, self.cubes
        if name == "unit_pos":
            return np.tile(np.arange(units, dtype=np.uint32), cubes)
        if name == "unit_pos_plane":  # before the unit_pos_<axis> names it shares a prefix with
            return cast(np.ndarray, get("unit_pos") % np.uint32(PLANE_WIDTH))
        if name == "plane_pos":
            return cast(np.ndarray, get("unit_pos") // np.uint32(PLANE_WIDTH))
        axis = name[-1]
        if name.startswith("unit_pos_"):
            inner, extent = {"x": (1, dx), "y": (dx, dy), "z": (dx * dy, dz)}[axis]
            if extent == 1:
                return cast(np.generic, np.uint32(0))
            per_cube = np.repeat(np.arange(extent, dtype=np.uint32), inner)
            return np.tile(per_cube, units // (inner * extent) * cubes)
        if name == "cube_pos" or name.startswith("cube_pos_"):
            cube = np.arange(self.first_cube, self.first_cube + cubes, dtype=np.int64)
            if name != "cube_pos":
                cube = {"x": cube % cx, "y": (cube // cx) % cy, "z": cube // (cx * cy)}[axis]
            if cubes == 1 or {"x": cx, "y": cy, "z": cz}.get(axis) == 1 and name != "cube_pos":
                return cast(np.generic, np.uint32(cube[0]))
            return np.repeat(cube.astype(np.uint32), units)
        if name.startswith("absolute_pos_"):
            dim = {"x": dx, "y": dy, "z": dz}[axis]
            return cast(np.ndarray | np.generic, get(f"cube_pos_{axis}") * np.uint32(dim) + get(f"unit_pos_{axis}"))
        if name == "absolute_pos":
            gx, gy = np.uint32(cx * dx), np.uint32(cy * dy)
            return cast(
                np.ndarray | np.generic,
                (get("absolute_pos_z") * gy + get("absolute_pos_y")) * gx + get("absolute_pos_x"),
            )
        raise KeyError(f"unknown builtin {name!r}")
