"""Variables of the IR: what an instruction reads and writes, and where instructions come from."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any

import attrs

from cubepy.ir.types import BOOL, Type

if TYPE_CHECKING:
    from cubepy.ir.types import ElemType


class VarKind(enum.Enum):
    """What a variable is, which decides how back ends store it."""

    GLOBAL = "global"  # a buffer parameter (Array/Tensor); id is its buffer slot
    SCALAR = "scalar"  # a scalar parameter; id is its scalar slot
    TENSOR_MAP = "tensor_map"  # a TMA descriptor parameter; id is its tensor-map slot
    CONST = "const"  # an immutable local, assigned exactly once
    MUT = "mut"  # a mutable local, assigned by Assign/InsertLane
    CONSTANT = "constant"  # a literal value
    SHARED = "shared"  # shared memory of `length` items, per cube
    LOCAL_ARRAY = "local_array"  # a per-unit array of `length` items
    CONST_TABLE = "const_table"  # a read-only table of `length` items whose values the kernel declares
    BUILTIN = "builtin"  # a topology builtin such as absolute_pos
    BARRIER = "barrier"  # an mbarrier in shared memory


# Units per plane on every runtime: what ``plane_dim`` reads (a CUDA warp).
PLANE_WIDTH = 32

# Builtin names and their element type (all u32), in CubeCL's vocabulary.
BUILTINS: tuple[str, ...] = (
    "absolute_pos",
    "absolute_pos_x",
    "absolute_pos_y",
    "absolute_pos_z",
    "unit_pos",
    "unit_pos_x",
    "unit_pos_y",
    "unit_pos_z",
    "cube_pos",
    "cube_pos_x",
    "cube_pos_y",
    "cube_pos_z",
    "cube_dim",
    "cube_dim_x",
    "cube_dim_y",
    "cube_dim_z",
    "cube_count",
    "cube_count_x",
    "cube_count_y",
    "cube_count_z",
    "plane_dim",
    "plane_pos",
    "unit_pos_plane",
    # clusters (sm_90): the cube's position in its cluster (rank: x fastest) and the cluster's shape
    "cube_pos_cluster",
    "cube_pos_cluster_x",
    "cube_pos_cluster_y",
    "cube_pos_cluster_z",
    "cube_cluster_dim",
    "cube_cluster_dim_x",
    "cube_cluster_dim_y",
    "cube_cluster_dim_z",
)

MEMORY_KINDS = frozenset({VarKind.GLOBAL, VarKind.SHARED, VarKind.LOCAL_ARRAY, VarKind.CONST_TABLE})
LOCAL_KINDS = frozenset({VarKind.CONST, VarKind.MUT})
# Every runtime places a shared memory at a multiple of at least this many bytes (a view of its bytes,
# ``Variable.aliases``, is as aligned as that and its offset allow).
SHARED_MIN_ALIGN = 16


@attrs.frozen(repr=False)
class Variable:
    """An IR value: its kind, id (unique per kind in a kernel) and item type.

    ``value`` holds a literal of CONSTANT variables, ``name`` the builtin's name or a debug name,
    ``length`` and ``alignment`` the size of SHARED, LOCAL_ARRAY and CONST_TABLE memories (in items / bytes);
    ``aliases`` of a SHARED memory that views another's bytes: (that memory's id, byte offset into it).
    """

    kind: VarKind
    id: int
    type: Type
    value: object = None
    name: str | None = attrs.field(default=None, eq=False)
    length: int | None = None
    alignment: int | None = None
    aliases: tuple[int, int] | None = None

    @property
    def elem(self) -> ElemType:
        """The element type."""
        return self.type.elem

    @property
    def is_memory(self) -> bool:
        """True for indexable memories (global buffers, shared memory, local arrays, constant tables)."""
        return self.kind in MEMORY_KINDS

    @property
    def is_constant(self) -> bool:
        """True for literal values."""
        return self.kind is VarKind.CONSTANT

    def __repr__(self) -> str:
        return format_variable(self)


_PREFIX = {
    VarKind.GLOBAL: "global",
    VarKind.SCALAR: "scalar",
    VarKind.TENSOR_MAP: "tmap",
    VarKind.SHARED: "shared",
    VarKind.LOCAL_ARRAY: "local",
    VarKind.CONST_TABLE: "const",
    VarKind.BARRIER: "barrier",
}


def format_variable(var: Variable) -> str:
    """``%3``, ``%m4`` (mutable), ``global[0]``, ``@absolute_pos``, ``1.5f32``, ``true``: a variable in the IR's text form."""
    kind = var.kind
    if kind is VarKind.CONST:
        return f"%{var.id}"
    if kind is VarKind.MUT:
        return f"%m{var.id}"
    if kind is VarKind.BUILTIN:
        return f"@{var.name}"
    if kind is VarKind.CONSTANT:
        if var.type.elem.is_bool:
            text = "true" if var.value else "false"
            return text if var.type.line == 1 else f"{text}x{var.type.line}"
        return f"{var.value!r}{var.type!r}"
    return f"{_PREFIX[kind]}[{var.id}]"


def constant(value: object, ty: Type) -> Variable:
    """A literal of item type ``ty`` (lines broadcast the value to every lane)."""
    number: Any = value
    if ty.elem.is_bool:
        value = bool(number)
    elif ty.elem.is_float:
        value = float(number)
    else:
        value = int(number)
    return Variable(VarKind.CONSTANT, 0, ty, value=value)


def builtin(name: str) -> Variable:
    """The topology builtin ``name`` (one of ``BUILTINS``), a u32."""
    from cubepy.ir.types import U32

    if name not in BUILTINS:
        raise ValueError(f"unknown builtin {name!r}")
    return Variable(VarKind.BUILTIN, BUILTINS.index(name), Type(U32), name=name)


TRUE = Variable(VarKind.CONSTANT, 0, Type(BOOL), value=True)


@attrs.frozen
class SourceLoc:
    """Where an instruction comes from in the user's code (1-based line, 0-based column)."""

    file: str
    line: int
    col: int = 0
    function: str | None = None

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


_MEMORY_LABELS = {
    VarKind.GLOBAL: "global buffer",
    VarKind.SHARED: "shared memory",
    VarKind.LOCAL_ARRAY: "local array",
    VarKind.CONST_TABLE: "constant table",
}


def describe_memory(var: Variable, name: str | None = None) -> str:
    """How error messages name a memory: ``global buffer 0 (x)``, ``shared memory 3``, ``constant table 1``."""
    label = f"{_MEMORY_LABELS.get(var.kind, var.kind.value)} {var.id}"
    return f"{label} ({name})" if name else label
