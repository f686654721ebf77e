"""Value ranges of integer IR values: what the ``bounds`` pass (``cubepy.ir.bounds``) proves checks and values with.

In a checked kernel every ``index``/``index_assign`` carries ``checked=True`` (``checked_io``).  For a
memory whose length the kernel declares (shared memory, a local array, a constant table) the check is
dead when the index provably lies in ``[0, length)`` for every unit that executes the access; the
``bounds`` pass then clears ``checked`` and both back ends emit the raw access.  Results cannot change:
an access proven in range is never out of range, so its checked and unchecked forms agree.

The analysis walks the structured IR once, in program order, keeping an inclusive interval per immutable
value (the exact mathematical value in its type, never a wrapped one):

- literals are exact; ``cube_dim*`` are exact (the kernel is compiled for one cube shape);
  ``unit_pos_x/y/z`` lie in ``[0, cube_dim.<axis>)``, ``unit_pos`` in ``[0, units)``, ``unit_pos_plane``
  in ``[0, 32)``, ``plane_pos`` in ``[0, ceil(units / 32))``, ``plane_dim`` is 32;
- ``add``/``sub``/``mul``/``min``/``max``/``floordiv``/``div_trunc``/``mod``/``rem_trunc``, shifts,
  ``bitand``/``bitor``/``bitxor`` of non-negative values, ``clamp``, ``select``, integer casts and
  ``assign`` combine intervals; a result that could leave its type's range (so wrap) is unknown;
- a ``range_loop``'s index lies in ``[start, end)`` (``[end + 1, start]`` counting down) when its step's
  sign is known, and its lower bound holds only when stepping past ``end`` cannot wrap;
- inside ``if c:`` (and the ``else`` of ``if_else``) a compare ``c`` of immutable operands narrows them
  (``and`` of compares narrows both in the taken arm); a ``switch`` case knows its value;
- ``a - b`` under a branch that took ``b < a`` is at least 1 (and cannot wrap);
- every interval is narrowed to the multiples of ``2**z`` where ``z`` low bits are known zero (literals,
  integer scalars the launch found multiples of 16, ``Param.multiple_of``, through ``add``, ``sub``, ``mul``,
  ``shl`` by a literal, ``min``/``max``/``select`` and loop indices), so ``cols - col`` with both multiples of
  8 and ``col < cols`` is at least 8;
- a value assigned more than once (a mutable local) is known once the walk has passed every assignment and
  each assigned an integer: the union of their intervals and the fewest of their trailing zeros
  (``valid = 0 ... if inside: valid = 8`` is 0 or 8 after the ``if``); before that, unknown;
- ``(x + v) - x`` is ``v`` (a slice's length ``(start + n) - start``); a buffer's ``len`` has the trailing
  zeros the launch found (``Param.multiple_of`` on a buffer).

Memory reads, other buffer metadata and anything else are unknown (their type's full range).
In every kernel, checked or not, values the facts decide are rewritten (``_simplified``), which LLVM cannot
see from the branch facts alone: an immutable integer pinned to one value becomes an assignment of it
(``min(cols - col, 8)`` above is 8), a ``min``/``max`` whose order is known its operand, and ``min(a, b)``
with ``a`` either 0 or ``2**z`` and ``b`` a multiple of ``2**z`` a ``select`` of ``a`` or 0 on ``b != 0``.
A global buffer's length is a launch value, so intervals never prove its checks; one symbolic rule does:
a branch that takes ``a < b`` records that order, and ``m[r * t.shape(1) + c]`` for a rank-2 tensor ``t`` under
``r < t.shape(0)`` and ``c < t.shape(1)`` (or the two dimensions swapped) is in bounds when its check compares
with ``t.len()`` (``m`` is ``t`` or a buffer of its length; ``t[r, c]`` of a tensor the launch found
contiguous is written this way); ``r < t.shape(0)`` also holds for a value computed like the compared one
(``i + 1`` written twice) and for ``x - k`` with a literal ``k`` that ``x`` is at least
(``launch_bounds.in_tensor_bounds``), and ``m[i]`` under ``i < n.len()`` is in bounds when ``n.len()`` is the word
``m``'s check compares with (``m`` itself, or a buffer the launch found of ``m``'s length;
``launch_bounds.in_len_bounds``).  Checks in loops are moved out of them by ``cubepy.ir.versioning``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from cubepy.ir import ops
from cubepy.ir.kernel import KernelDefinition
from cubepy.ir.ops import branch
from cubepy.ir.scope import Instruction, walk
from cubepy.ir.types import ElemType
from cubepy.ir.variable import BUILTINS, PLANE_WIDTH, Variable, VarKind

Interval = tuple[int, int]  # inclusive (lo, hi)
_Key = tuple[VarKind, int]
# Intervals by variable key; a strict order ``a < b`` that a branch established is the key ("lt", a, b).
Env = dict[tuple[Any, ...], Interval]
DECLARED_LENGTH = frozenset({VarKind.SHARED, VarKind.LOCAL_ARRAY, VarKind.CONST_TABLE})
CUBE_POS_KEY: _Key = (VarKind.BUILTIN, BUILTINS.index("cube_pos"))  # the linear cube position builtin
_FLIPPED: dict[type[ops.Compare], type[ops.Compare]] = {ops.Lt: ops.Ge, ops.Le: ops.Gt, ops.Gt: ops.Le, ops.Ge: ops.Lt}


def type_range(elem: ElemType) -> Interval | None:
    """Every value of an integer or bool element type (None for other types)."""
    if elem.is_bool:
        return (0, 1)
    if not elem.is_int:
        return None
    bits = elem.bits
    return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if elem.kind == "int" else (0, (1 << bits) - 1)


def _builtin_range(name: str, cube_dim: tuple[int, int, int]) -> Interval | None:
    units = cube_dim[0] * cube_dim[1] * cube_dim[2]
    axes = dict(zip("xyz", cube_dim))
    if name == "cube_dim":
        return (units, units)
    if name.startswith("cube_dim_"):
        return (axes[name[-1]], axes[name[-1]])
    if name == "unit_pos":
        return (0, units - 1)
    if name.startswith("unit_pos_") and name[-1] in axes:
        return (0, axes[name[-1]] - 1)
    if name == "unit_pos_plane":
        return (0, PLANE_WIDTH - 1)
    if name == "plane_pos":
        return (0, (units + PLANE_WIDTH - 1) // PLANE_WIDTH - 1)
    if name == "plane_dim":
        return (PLANE_WIDTH, PLANE_WIDTH)
    return None


class RangeAnalysis:
    """Intervals of the immutable integer values of one kernel, as the walk reaches them."""

    def __init__(self, definition: KernelDefinition) -> None:
        self.cube_dim = definition.cube_dim
        # A value assigned more than once (a mutable local, or a loop index written in its body) is unknown.
        self.writes: Counter[_Key] = Counter(
            (var.kind, var.id) for inst in walk(definition.body) for var in _defined(inst)
        )
        self.reassigned = {key for key, count in self.writes.items() if count > 1}
        # for the compares ``cubepy.ir.bounds`` adds
        self.next_id = max((key[1] for key in self.writes if key[0] is VarKind.CONST), default=-1) + 1
        self.defs: dict[_Key, ops.Operation] = {}
        self.buffers = {p.var.id: p for p in definition.buffers}
        # Known trailing zero bits (the value is a multiple of 2**n) of immutable values; a property of the
        # value, so one map for the whole walk.
        self.zeros: dict[_Key, int] = {
            (p.var.kind, p.var.id): p.multiple_of.bit_length() - 1
            for p in definition.params
            if p.multiple_of > 1 and p.var.kind is VarKind.SCALAR
        }
        # Values assigned more than once: (writes seen, interval, trailing zeros) over the assignments the walk
        # has passed; once it has passed all of them, every read sees one of those values.
        self.assigned: dict[_Key, tuple[int, Interval, int] | None] = {}
        self.cube_count_as = definition.cube_count_as

    def of(self, var: Variable, env: Env) -> Interval | None:
        """The interval of ``var`` (None: not a scalar integer or bool)."""
        if var.type.is_line:
            return None
        full = type_range(var.elem)
        if full is None:
            return None
        if var.kind is VarKind.CONSTANT:
            value = int(var.value)  # type: ignore[call-overload]
            return (value, value)
        if not self.stable(var):
            assigned = self._all_assigned(var)
            return full if assigned is None else assigned[0]
        found = env.get((var.kind, var.id))
        if found is not None:
            return found
        if var.kind is VarKind.BUILTIN and var.name is not None:
            return _builtin_range(var.name, self.cube_dim) or full
        return full

    def stable(self, var: Variable) -> bool:
        """Whether ``var`` keeps the value a compare read (so the compare's outcome narrows it later): a builtin,
        a scalar parameter or an immutable local."""
        if var.kind in (VarKind.BUILTIN, VarKind.SCALAR):
            return True
        return var.kind is VarKind.CONST and (var.kind, var.id) not in self.reassigned

    def trailing_zeros(self, var: Variable) -> int:
        """How many low bits of ``var`` are known zero (it is a multiple of ``2**n``); 0 when unknown."""
        if var.type.is_line or not var.elem.is_int:
            return 0
        if var.kind is VarKind.CONSTANT:
            value = int(var.value) % (1 << var.elem.bits)  # type: ignore[call-overload]
            return var.elem.bits if value == 0 else (value & -value).bit_length() - 1
        if not self.stable(var):
            assigned = self._all_assigned(var)
            return 0 if assigned is None else assigned[1]
        return self.zeros.get((var.kind, var.id), 0)

    def _all_assigned(self, var: Variable) -> tuple[Interval, int] | None:
        """(interval, trailing zeros) of a value assigned more than once, when the walk has passed every
        assignment and each was a plain ``assign`` of an integer (``valid = 0 ... if inside: valid = 8``)."""
        key = (var.kind, var.id)
        found = self.assigned.get(key)
        if found is None or found[0] != self.writes[key]:
            return None
        return found[1], found[2]

    def _record_assignment(self, inst: Instruction, env: Env) -> None:
        out, op = inst.out, inst.operation
        assert out is not None
        key = (out.kind, out.id)
        if key in self.assigned and self.assigned[key] is None:
            return
        source = op.input if isinstance(op, ops.Assign) and not out.type.is_line else None
        interval = None if source is None else self.of(source, env)
        if source is None or interval is None or not out.elem.is_int or out.elem != source.elem:
            self.assigned[key] = None
            return
        zeros = min(self.trailing_zeros(source), out.elem.bits)
        seen = self.assigned.get(key)
        if seen is not None:
            interval = (min(interval[0], seen[1][0]), max(interval[1], seen[1][1]))
            zeros = min(zeros, seen[2])
        self.assigned[key] = ((seen[0] if seen else 0) + 1, interval, zeros)

    def _zeros_of(self, op: ops.Operation) -> int:
        """Known trailing zeros of ``op``'s result: low bits survive wrapping, so every rule holds modulo 2**bits."""
        tz = self.trailing_zeros
        if isinstance(op, (ops.Assign, ops.Cast)):  # a cast from an integer keeps its low bits (0 from others)
            return tz(op.input)
        if isinstance(op, (ops.Len, ops.BufferLen)) and op.memory.kind is VarKind.GLOBAL:
            param = self.buffers.get(op.memory.id)  # the launch's divisibility of ``len()``
            if param is None or (isinstance(op, ops.BufferLen) and not param.len_is_buffer_len):
                return 0
            return param.multiple_of.bit_length() - 1
        if isinstance(op, (ops.Shape, ops.Stride)) and op.memory.kind is VarKind.GLOBAL and op.dim is not None:
            param = self.buffers.get(op.memory.id)
            if param is None:
                return 0
            multiples = param.shape_multiple_of if isinstance(op, ops.Shape) else param.stride_multiple_of
            dim = int(op.dim.value) if op.dim.is_constant else -1  # type: ignore[call-overload]
            return multiples[dim].bit_length() - 1 if 0 <= dim < len(multiples) else 0
        if isinstance(op, ops.Select):
            return min(tz(op.then), tz(op.otherwise))
        if not isinstance(op, ops.Binary):
            return 0
        a, b = tz(op.lhs), tz(op.rhs)
        if isinstance(op, (ops.Add, ops.Sub, ops.Min, ops.Max, ops.Bitor, ops.Bitxor)):
            return min(a, b)
        if isinstance(op, ops.Mul):
            return a + b
        if isinstance(op, ops.Bitand):
            return max(a, b)
        if isinstance(op, ops.Shl) and op.rhs.kind is VarKind.CONSTANT:
            # the amount is read as unsigned; at or past the width the result is 0 (``cubepy.ir.numerics``)
            bits = op.lhs.elem.bits
            shift: int = int(op.rhs.value) % (1 << op.rhs.elem.bits)  # type: ignore[call-overload]
            return bits if shift >= bits else a + shift
        return 0

    # -- one instruction --------------------------------------------------------------------------------
    def define(self, inst: Instruction, env: Env) -> None:
        """Record the interval of ``inst``'s result, when it is an immutable integer."""
        out = inst.out
        if out is not None and (out.kind, out.id) in self.reassigned:
            self._record_assignment(inst, env)
        if out is None or out.kind is not VarKind.CONST or out.type.is_line:
            return
        key = (out.kind, out.id)
        self.defs[key] = inst.operation
        full = type_range(out.elem)
        if full is None or key in self.reassigned:
            return
        zeros = min(self._zeros_of(inst.operation), out.elem.bits)
        if zeros:
            self.zeros[key] = zeros
        found = self._evaluate(inst.operation, env)
        if found is not None and full[0] <= found[0] and found[1] <= full[1]:
            env[key] = multiples_within(found, zeros)

    def _evaluate(self, op: ops.Operation, env: Env) -> Interval | None:
        if isinstance(op, (ops.Assign, ops.Cast)):
            return self.of(op.input, env)
        if isinstance(op, ops.Clamp):
            x, lo, hi = self.of(op.input, env), self.of(op.lo, env), self.of(op.hi, env)
            if x is None or lo is None or hi is None:
                return None
            low = max(x[0], lo[0])
            return (min(low, hi[0]), min(max(x[1], lo[1]), hi[1]))
        if isinstance(op, ops.Select):
            a, b = self.of(op.then, env), self.of(op.otherwise, env)
            return None if a is None or b is None else (min(a[0], b[0]), max(a[1], b[1]))
        if isinstance(op, ops.Binary) and not op.lhs.elem.is_bool:
            kept = self.added_back(op)
            if kept is not None:
                return self.of(kept, env)
            a, b = self.of(op.lhs, env), self.of(op.rhs, env)
            if a is None or b is None:
                return None
            if isinstance(op, ops.Sub) and ("lt", *(self._order_key(v) for v in (op.rhs, op.lhs))) in env:
                return (max(a[0] - b[1], 1), a[1] - b[0])  # a branch took rhs < lhs: no wrap, at least 1
            return _binary(type(op), a, b, op.lhs.elem.bits)
        return None

    def added_back(self, op: ops.Operation) -> Variable | None:
        """``v`` when ``op`` is ``(x + v) - x`` (a slice's length ``(start + n) - start``): equal modulo 2**bits."""
        if not isinstance(op, ops.Sub) or not self.stable(op.lhs) or op.lhs.type.is_line:
            return None
        add = self.defs.get((op.lhs.kind, op.lhs.id))
        if not isinstance(add, ops.Add) or add.lhs.type != op.lhs.type or add.rhs.type != op.lhs.type:
            return None
        same = self.stable(op.rhs) or op.rhs.kind is VarKind.CONSTANT  # else it may change between the two
        if same and add.lhs == op.rhs:
            return add.rhs
        if same and add.rhs == op.rhs:
            return add.lhs
        return None

    def _order_key(self, var: Variable) -> _Key | None:
        return (var.kind, var.id) if self.stable(var) else None

    # -- narrowing by a branch's condition ----------------------------------------------------------------
    def narrowed(self, cond: Variable, taken: bool, env: Env) -> Env:
        """``env`` with what ``cond`` being ``taken`` tells about immutable operands of its compare(s)."""
        out = dict(env)
        self._narrow(cond, taken, out, depth=0)
        return out

    def _narrow(self, cond: Variable, taken: bool, env: Env, depth: int) -> None:
        if depth > 8 or not self.stable(cond):
            return
        op = self.defs.get((cond.kind, cond.id))
        if isinstance(op, ops.And) and taken:
            self._narrow(op.lhs, True, env, depth + 1)
            self._narrow(op.rhs, True, env, depth + 1)
            return
        if isinstance(op, ops.Not):
            self._narrow(op.input, not taken, env, depth + 1)
            return
        if not isinstance(op, ops.Compare) or type(op) not in _FLIPPED or op.lhs.type.is_line:
            return
        kind = type(op) if taken else _FLIPPED[type(op)]
        a, b = self.of(op.lhs, env), self.of(op.rhs, env)
        if a is None or b is None:
            return
        if kind in (ops.Lt, ops.Gt) and self.stable(op.lhs) and self.stable(op.rhs):
            low, high = (op.lhs, op.rhs) if kind is ops.Lt else (op.rhs, op.lhs)
            env[("lt", (low.kind, low.id), (high.kind, high.id))] = (1, 1)
        # lhs <kind> rhs: narrow each immutable side by the other's extreme.
        if kind is ops.Lt:
            self._meet(op.lhs, (a[0], b[1] - 1), env)
            self._meet(op.rhs, (a[0] + 1, b[1]), env)
        elif kind is ops.Le:
            self._meet(op.lhs, (a[0], b[1]), env)
            self._meet(op.rhs, (a[0], b[1]), env)
        elif kind is ops.Gt:
            self._meet(op.lhs, (b[0] + 1, a[1]), env)
            self._meet(op.rhs, (b[0], a[1] - 1), env)
        else:
            self._meet(op.lhs, (b[0], a[1]), env)
            self._meet(op.rhs, (b[0], a[1]), env)

    def _meet(self, var: Variable, bound: Interval, env: Env) -> None:
        if not self.stable(var):
            return
        now = self.of(var, env)
        if now is None:
            return
        lo, hi = max(now[0], bound[0]), min(now[1], bound[1])
        if lo <= hi:  # an empty meet means the arm never runs; keeping the old interval is still sound
            env[(var.kind, var.id)] = (lo, hi)

    def loop_index(self, loop: branch.RangeLoop, env: Env) -> Interval | None:
        """The interval of a ``range_loop``'s index inside its body."""
        index, start, end, step = loop.index, self.of(loop.start, env), self.of(loop.end, env), self.of(loop.step, env)
        full = type_range(index.elem)
        if full is None or start is None or end is None or step is None or index.type.is_line:
            return None
        if step[0] > 0:
            hi = end[1] if loop.inclusive else end[1] - 1
            # The index passes ``end`` by at most one step: below the type's top it cannot wrap around.
            lo = start[0] if hi + step[1] <= full[1] else full[0]
            return (lo, hi) if lo <= hi else None
        if step[1] < 0:
            lo = end[0] if loop.inclusive else end[0] + 1
            hi = start[1] if lo + step[0] >= full[0] else full[1]
            return (lo, hi) if lo <= hi else None
        return None


def _defined(inst: Instruction) -> tuple[Variable, ...]:
    """The variables ``inst`` defines: its result, and a ``range_loop``'s index."""
    found: tuple[Variable, ...] = () if inst.out is None else (inst.out,)
    if isinstance(inst.operation, branch.RangeLoop):
        found += (inst.operation.index,)
    return found


def multiples_within(interval: Interval, zeros: int) -> Interval:
    """``interval`` narrowed to its multiples of ``2**zeros`` (unchanged when it holds none: a dead path)."""
    step = 1 << zeros
    lo, hi = -(-interval[0] // step) * step, interval[1] // step * step
    return (lo, hi) if lo <= hi else interval


def _binary(kind: type, a: Interval, b: Interval, bits: int) -> Interval | None:
    """``a kind b`` over intervals (None: unknown)."""
    if kind is ops.Add:
        return (a[0] + b[0], a[1] + b[1])
    if kind is ops.Sub:
        return (a[0] - b[1], a[1] - b[0])
    if kind is ops.Mul:
        corners = [x * y for x in a for y in b]
        return (min(corners), max(corners))
    if kind is ops.Min:
        return (min(a[0], b[0]), min(a[1], b[1]))
    if kind is ops.Max:
        return (max(a[0], b[0]), max(a[1], b[1]))
    if kind in (ops.Floordiv, ops.DivTrunc) and b[0] > 0:
        if kind is ops.DivTrunc and a[0] < 0:
            return None
        return (min(a[0] // b[0], a[0] // b[1]), max(a[1] // b[0], a[1] // b[1]))
    if kind is ops.Mod and b[0] > 0:
        return (0, b[1] - 1) if a[0] < 0 or a[1] >= b[0] else a  # in [0, b) and at most a when a < b
    if kind is ops.RemTrunc and b[0] > 0 and a[0] >= 0:
        return (0, min(a[1], b[1] - 1))
    if kind is ops.Shl and 0 <= b[0] and b[1] < bits:
        return _binary(ops.Mul, a, (1 << b[0], 1 << b[1]), bits)
    if kind is ops.Shr and 0 <= b[0] and b[1] < bits and a[0] >= 0:
        return (a[0] >> b[1], a[1] >> b[0])
    if kind is ops.Bitand and (a[0] >= 0 or b[0] >= 0):
        his = [x[1] for x in (a, b) if x[0] >= 0]
        return (0, min(his))
    if kind in (ops.Bitor, ops.Bitxor) and a[0] >= 0 and b[0] >= 0:
        return (0, (1 << max(a[1], b[1]).bit_length()) - 1)
    return None
