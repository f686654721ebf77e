"""A whole kernel: parameters, body, launch shape and declared memories."""

from __future__ import annotations

import attrs

from cubepy.ir.scope import Scope
from cubepy.ir.types import ElemType, Type
from cubepy.ir.variable import Variable, VarKind

PARAM_ROLES = frozenset({"array", "tensor", "scalar", "tensor_map"})

# CUDA's launch limits (every compute capability cubepy targets): a GPU refuses larger launches.
MAX_UNITS_PER_CUBE = 1024
MAX_CUBE_DIM = (1024, 1024, 64)
MAX_CUBE_COUNT = (2**31 - 1, 65535, 65535)
# CUDA's constant bank: the __constant__ (PTX ``.const``) data of one module shares 64 KiB.
MAX_CONST_BYTES = 64 * 1024


def launch_shape_problem(
    what: str, dims: tuple[object, ...], maximum: tuple[int, int, int], minimum: int
) -> str | None:
    """What is wrong with launch extent ``dims`` (x, y, z ints) of ``what``, or None."""
    if not 1 <= len(dims) <= 3:
        return f"{what} = {tuple(dims)!r}: expected 1 to 3 axes (x, y, z), got {len(dims)}"
    total = 1
    for axis, value, limit in zip("xyz", dims, maximum):
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            expected = "a non-negative int" if minimum == 0 else "a positive int"
            return f"{what}.{axis} = {value!r}: expected {expected}"
        if value > limit:
            return (
                f"{what}.{axis} = {value} exceeds CUDA's limit of {limit} "
                f"(x, y, z at most {', '.join(map(str, maximum))})"
            )
        total *= value
    if maximum is MAX_CUBE_DIM and total > MAX_UNITS_PER_CUBE:
        return f"{what} {tuple(dims)} has {total} units; a cube holds at most {MAX_UNITS_PER_CUBE}"
    return None


@attrs.frozen
class ProductFactor:
    """One factor of an array's length as the launch found it (``Param.len_as_product``): the value of the scalar
    parameter at ``slot`` (``kind`` "scalar"), ``shape(dim)`` of the tensor parameter at buffer ``slot``
    ("shape"), or ``len()`` of the buffer parameter at ``slot`` ("len")."""

    kind: str
    slot: int
    dim: int = 0

    def __str__(self) -> str:
        if self.kind == "scalar":
            return f"scalar[{self.slot}]"
        return f"shape global[{self.slot}], {self.dim}" if self.kind == "shape" else f"len global[{self.slot}]"


@attrs.frozen
class Param:
    """A kernel parameter: its variable (GLOBAL, SCALAR or TENSOR_MAP), user-facing name and role.

    ``len_is_buffer_len``: the launch guarantees a buffer's ``len`` equals its ``buffer_len`` (part of the
    compilation argument, so of the cache key); checked accesses then compare against the ``len`` word,
    which the kernel's own ``i < a.len()`` guard reads too.  ``exclusive``: the launch checked that no other
    buffer or tensor-map argument overlaps this buffer's memory; a buffer the kernel never writes is then
    read through the non-coherent path on the GPU (``noalias readonly``, ``ld.global.nc``).  ``rank``: a
    tensor's number of dimensions as the launch binds them (None for a tensor compiled without a launch,
    and for an array, whose rank is always 1: ``cubepy.compiler.abi.static_rank``), so shape and stride
    words sit at fixed places in parameter space.  ``same_len``: the slot of an earlier buffer the launch
    found to have the same ``len`` (part of the cache key); this buffer's ``len`` is then read from that
    buffer's word, so one guard ``i < out.len()`` proves the checks of every buffer of that length.
    ``multiple_of``: a power of two the launch found an integer scalar's value, or a buffer's ``len()``, to be a
    multiple of (part of the cache key, as Triton's divisibility specialization; 1 when nothing is known).
    ``shape_multiple_of``/``stride_multiple_of``: the same for each dimension of a tensor of known rank (empty
    when nothing is known).  ``len_as_shape``: ``(slot, dim)`` of an earlier rank-known tensor whose
    ``shape(dim)`` the launch found equal to this array's item count (part of the cache key): a guard
    ``i < t.shape(dim) // line_size`` then proves this array's checked accesses (a layer norm's ``w[col]``
    under ``col < x.shape(1)``).  ``unit_strides``: per dimension of a tensor of known rank, whether the launch
    found its stride to be 1 (part of the cache key); the frontend then indexes ``t[i, j]`` as
    ``i * stride(0) + j``, and ``stride(d)`` of such a dimension is 1 at run time.  ``contiguous``: a rank-2
    tensor whose strides the launch found to be ``(shape(1), 1)`` (part of the cache key); the frontend then
    indexes ``t[i, j]`` as ``i * shape(1) + j``.  ``same_shape``: the slot of an earlier tensor of the same rank
    the launch found to have the same shape (part of the cache key): a guard ``j < x.shape(1)`` then bounds
    ``out``'s index as well as ``x``'s (a stencil's ``out[i, j]``).  ``address_multiple_of``: a power of two (in
    bytes) the launch found a buffer's first element's address to be a multiple of (part of the cache key; 1 when
    nothing is known): adjacent items then share wider aligned stores (``cubepy.ir.store_pairs``).
    ``len_as_product``: ``(outer, inner)``, two factors the launch found this array's or tensor's ``len`` to be
    the product of, ``outer * (inner // line_size)``, each given as every parameter value equal to it (``ProductFactor``s), both at least 1 and ``inner`` a multiple of the
    line size (part of the cache key): ``m[r * inner + c]`` under ``r < outer`` and ``c < inner`` (or ``r = x %
    outer``) is then in bounds (``cubepy.ir.product_bounds``; a matmul's ``c[row * n + col]`` of an ``m * n``
    array, a layer norm's partial rows ``dw[(row % group) * n + col]``).
    """

    var: Variable
    name: str
    role: str  # one of PARAM_ROLES
    len_is_buffer_len: bool = False
    exclusive: bool = False
    rank: int | None = None
    same_len: int | None = None
    multiple_of: int = 1
    shape_multiple_of: tuple[int, ...] = ()
    stride_multiple_of: tuple[int, ...] = ()
    len_as_shape: tuple[int, int] | None = None
    unit_strides: tuple[bool, ...] = ()
    contiguous: bool = False
    same_shape: int | None = None
    address_multiple_of: int = 1
    len_as_product: tuple[tuple[ProductFactor, ...], tuple[ProductFactor, ...]] | None = None

    @property
    def slot(self) -> int:
        """The binding slot of the parameter within its kind (buffers, scalars, tensor maps)."""
        return self.var.id


@attrs.frozen
class ConstTable:
    """A read-only table the kernel declares: its CONST_TABLE variable and its values in item order.

    ``values`` are Python numbers of the element type (bool, int, or float: every f16/bf16/f32/f64 value
    is exactly a Python float), so a table is hashable, printable and part of the kernel's equality.
    """

    var: Variable
    values: tuple[bool | int | float, ...]

    @property
    def nbytes(self) -> int:
        """Bytes the table occupies in constant memory."""
        return len(self.values) * self.var.type.size


def const_table(table_id: int, elem: ElemType, values: tuple[bool | int | float, ...]) -> ConstTable:
    """The constant table ``const[table_id]`` of scalar ``elem`` items holding ``values``."""
    var = Variable(VarKind.CONST_TABLE, table_id, Type(elem), length=len(values))
    return ConstTable(var, tuple(values))


@attrs.frozen
class KernelDefinition:
    """Everything a back end needs to run or compile one specialization of a kernel.

    Params are in declaration order; buffers, scalars and tensor maps each number their slots from 0
    in that order, which is also the order in which launch binds runtime arguments.
    """

    name: str
    params: tuple[Param, ...]
    body: Scope
    cube_dim: tuple[int, int, int]
    shared_memories: tuple[Variable, ...] = ()
    local_arrays: tuple[Variable, ...] = ()
    barriers: tuple[Variable, ...] = ()
    const_tables: tuple[ConstTable, ...] = ()
    checked: bool = False
    source_file: str | None = None
    contract: bool = False  # whether the `contract` pass fuses a*b+c into fma (cubepy.ir.contract)
    # whether f32 exp2/exp/log2/log/sin/cos/rsqrt and / may use the GPU's approximate .ftz instructions
    fastmath: bool = False
    # parameter values the launch found equal to its number of cubes (part of the cache key): ``CUBE_POS`` is
    # below each, so a row picked by ``CUBE_POS`` of a tensor with that many rows needs no check
    # (``cubepy.ir.ranges``); empty when the launch found none or compiled without a cube count
    cube_count_as: tuple[ProductFactor, ...] = ()

    @property
    def buffers(self) -> tuple[Param, ...]:
        """Buffer (array and tensor) parameters in slot order."""
        return tuple(p for p in self.params if p.role in ("array", "tensor"))

    @property
    def scalars(self) -> tuple[Param, ...]:
        """Scalar parameters in slot order."""
        return tuple(p for p in self.params if p.role == "scalar")

    @property
    def tensor_maps(self) -> tuple[Param, ...]:
        """Tensor-map parameters in slot order."""
        return tuple(p for p in self.params if p.role == "tensor_map")

    @property
    def units_per_cube(self) -> int:
        """Number of units in one cube."""
        x, y, z = self.cube_dim
        return x * y * z


def written_slots(definition: KernelDefinition) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The buffer and tensor-map slots a kernel may write, read from the operations' records: the buffers
    and tensor maps named by an operand the record lists as written."""
    from cubepy.ir.scope import walk

    buffers: set[int] = set()
    maps: set[int] = set()
    for inst in walk(definition.body):
        operation = inst.operation
        for field in operation.RECORD.writes:
            var = getattr(operation, field)
            if var.kind is VarKind.GLOBAL:
                buffers.add(var.id)
            elif var.kind is VarKind.TENSOR_MAP:
                maps.add(var.id)
    return tuple(sorted(buffers)), tuple(sorted(maps))
