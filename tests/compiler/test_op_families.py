"""Every op family lowers for every element type it accepts, and ptxas accepts the PTX for sm_90a.

One kernel per (family, element type) keeps the matrix fast: each kernel reads its operands from
buffers (so nothing folds away) and writes every result back.
"""

from __future__ import annotations

import pytest

from cubepy.ir import ALL_ELEM_TYPES, BF16, BOOL, F16, U32, ElemType, builtin, ops
from cubepy.ir.ops import arith, branch
from cubepy.ir.scope import Scope
from tests.irbuild import KernelBuilder, T, lit

from .conftest import compile_checked

FLOATS = [e for e in ALL_ELEM_TYPES if e.is_float]
INTS = [e for e in ALL_ELEM_TYPES if e.is_int]
NUMBERS = FLOATS + INTS
LINES = [1, 4]


def _ids(elems):
    return [e.name for e in elems]


def _accepts(cls, elem: ElemType) -> bool:
    """Whether the op's record accepts operands of ``elem``."""
    return {"float": elem.is_float, "int": elem.is_int, "bool": elem.is_bool, "number": not elem.is_bool, "any": True}[
        cls.RECORD.operand_kind
    ]


def _io_kernel(name: str, elem: ElemType, line: int, n_inputs: int = 2, out_elem: ElemType | None = None):
    kb = KernelBuilder(f"{name}_{elem.name}x{line}")
    inputs = [kb.array(T(elem, line), f"in{i}") for i in range(n_inputs)]
    pos = builtin("absolute_pos")
    values = [kb.index(buf, pos) for buf in inputs]
    return kb, values, pos


def _write(kb: KernelBuilder, value, pos, name: str = "out") -> None:
    out = kb.array(value.type, f"{name}{len(kb.params)}")
    kb.store(out, pos, value)


@pytest.mark.parametrize("line", LINES)
@pytest.mark.parametrize("elem", NUMBERS + [BOOL], ids=_ids(NUMBERS + [BOOL]))
def test_unary_family(elem, line):
    kb, (x, _), pos = _io_kernel("unary", elem, line)
    for cls in arith.UNARY_OPS:
        if _accepts(cls, elem):
            _write(kb, kb.unary(cls.RECORD.name, x), pos)
    compile_checked(kb.build())


@pytest.mark.parametrize("line", LINES)
@pytest.mark.parametrize("elem", NUMBERS + [BOOL], ids=_ids(NUMBERS + [BOOL]))
def test_binary_and_compare_family(elem, line):
    kb, (a, b), pos = _io_kernel("binary", elem, line)
    for cls in arith.BINARY_OPS:
        if cls is not ops.Powi and _accepts(cls, elem):
            _write(kb, kb.binary(cls.RECORD.name, a, b), pos)
    for cls in arith.COMPARE_OPS:
        _write(kb, kb.compare(cls.RECORD.name, a, b), pos)
    _write(kb, kb.emit(ops.Select(kb.compare("lt", a, b), a, b), a.type), pos)
    if not elem.is_bool:
        _write(kb, kb.emit(ops.Clamp(a, b, b), a.type), pos)
    if elem.is_float:
        _write(kb, kb.emit(ops.Fma(a, b, a), a.type), pos)
        for exp_elem in INTS:
            exponent = kb.cast(b, T(exp_elem, line))
            _write(kb, kb.emit(ops.Powi(a, exponent), a.type), pos)
    compile_checked(kb.build())


@pytest.mark.parametrize("line", LINES)
@pytest.mark.parametrize("src", ALL_ELEM_TYPES, ids=_ids(ALL_ELEM_TYPES))
def test_cast_to_every_type(src, line):
    kb, (x, _), pos = _io_kernel("cast", src, line)
    for dst in ALL_ELEM_TYPES:
        _write(kb, kb.cast(x, T(dst, line)), pos)
    if line == 1:  # broadcast a scalar into a line while converting
        _write(kb, kb.cast(x, T(ALL_ELEM_TYPES[0], 4)), pos)
    compile_checked(kb.build())


@pytest.mark.parametrize("src", ALL_ELEM_TYPES, ids=_ids(ALL_ELEM_TYPES))
def test_bitcast_to_same_size(src):
    kb, (x, _), pos = _io_kernel("bitcast", src, 1)
    for dst in ALL_ELEM_TYPES:
        if dst.size == src.size:
            _write(kb, kb.emit(ops.Bitcast(x), T(dst)), pos)
    if src.size in (1, 2):  # a line reinterpreted as one wider scalar
        for dst in ALL_ELEM_TYPES:
            if dst.size == 4 * src.size and not dst.is_bool:
                wide = kb.index(kb.array(T(src, 4), "lines"), pos)
                _write(kb, kb.emit(ops.Bitcast(wide), T(dst)), pos)
    compile_checked(kb.build())


@pytest.mark.parametrize("line", [1, 2, 4])
@pytest.mark.parametrize("elem", ALL_ELEM_TYPES, ids=_ids(ALL_ELEM_TYPES))
def test_memory_family(elem, line):
    """Checked and unchecked loads/stores on buffers, shared memory and local arrays; lanes; metadata."""
    kb = KernelBuilder(f"memory_{elem.name}x{line}")
    src, dst = kb.array(T(elem, line), "src"), kb.tensor(T(elem, line), "dst")
    shared = kb.shared(T(elem, line), 64, alignment=128)
    local = kb.local(T(elem, line), 8)
    pos = builtin("absolute_pos")
    unit = builtin("unit_pos")
    slot = kb.binary("bitand", unit, lit(7, U32))
    value = kb.index(src, pos, checked=True)
    kb.store(shared, unit, value, checked=True)
    kb.store(local, slot, kb.index(src, pos))
    kb.emit(ops.SyncCube())
    loaded = kb.index(shared, kb.binary("bitxor", unit, lit(1, U32)))
    from_local = kb.index(local, slot, checked=True)
    kb.store(dst, pos, loaded, checked=True)
    kb.store(dst, kb.binary("add", pos, lit(1, U32)), from_local)
    if line > 1:
        lane = kb.emit(ops.ExtractLane(loaded, lit(1, U32)), T(elem))
        mutable = kb.mut(T(elem, line))
        kb.assign(mutable, loaded)
        kb.emit(ops.InsertLane(mutable, lit(0, U32), lane))
        kb.store(dst, pos, mutable)
    for kind in ("len", "buffer_len", "rank"):
        kb.meta(kind, dst)
    for kind in ("shape", "stride"):
        size = kb.meta(kind, dst, lit(0, U32))
        kb.store(kb.array(T(U32), f"meta_{kind}"), pos, size)
    compile_checked(kb.build())


ATOMIC_CASES = [
    (e, op)
    for e in ALL_ELEM_TYPES
    for op in sorted(c.RECORD.name.removeprefix("atomic_") for c in ops.ATOMIC_OPS)
    if not (e.is_float and op in ("and", "or", "xor"))
    and not (e.is_bool and op not in ("load", "store", "exchange"))
    and not (op in ("inc", "dec") and e.name != "u32")
]  # CUDA's atomicInc/Dec count in u32


@pytest.mark.parametrize("space", ["global", "shared"])
@pytest.mark.parametrize("elem", ALL_ELEM_TYPES, ids=_ids(ALL_ELEM_TYPES))
def test_atomic_family(elem, space):
    kb = KernelBuilder(f"atomic_{space}_{elem.name}")
    memory = kb.array(T(elem), "counters") if space == "global" else kb.shared(T(elem), 32)
    values = kb.array(T(elem), "values")
    out = kb.array(T(elem), "old")
    pos = builtin("absolute_pos")
    slot = kb.binary("bitand", pos, lit(31, U32))
    value = kb.index(values, pos)
    for e, name in ATOMIC_CASES:
        if e != elem:
            continue
        operand = None if name == "load" else value
        result = kb.atomic(name, memory, slot, operand)
        if result is not None:
            kb.store(out, pos, result)
    if not elem.is_bool:
        old = kb.emit(ops.AtomicCompareExchange(memory, slot, value, value), T(elem))
        kb.store(out, pos, old)
    compile_checked(kb.build())


@pytest.mark.parametrize("line", LINES)
@pytest.mark.parametrize("elem", NUMBERS + [BOOL], ids=_ids(NUMBERS + [BOOL]))
def test_plane_family(elem, line):
    kb, (x,), pos = _io_kernel("plane", elem, line, n_inputs=1)
    lane = kb.binary("bitand", pos, lit(31, U32))
    for cls in ops.PLANE_OPS:
        if cls in (ops.PlaneAll, ops.PlaneAny) and not elem.is_bool:
            continue
        if cls in (ops.PlaneBallot, ops.PlaneElect):
            continue
        if cls in (ops.PlaneMatchAny, ops.PlaneMatchAll):  # scalars of 32 or 64 bits, giving a u32 mask
            if line == 1 and not elem.is_bool and elem.bits in (32, 64):
                kb.store(kb.array(T(U32), f"mask_{cls.RECORD.name}"), pos, kb.emit(cls(x), T(U32)))
            continue
        arg = lane if cls in ops.PLANE_MOVES else None
        _write(kb, kb.emit(cls(x, arg), x.type), pos)
    if elem.is_bool and line == 1:
        _write(kb, kb.emit(ops.PlaneBallot(x), T(U32)), pos)
        _write(kb, kb.emit(ops.PlaneBallot(x), T(U32, 4)), pos)
        _write(kb, kb.emit(ops.PlaneElect(), T(BOOL)), pos)
    compile_checked(kb.build())


def test_sync_family_and_every_builtin():
    kb = KernelBuilder("sync_builtins", cube_dim=(8, 4, 2))
    out = kb.array(T(U32), "out")
    total = lit(0, U32)
    for name in __import__("cubepy.ir", fromlist=["BUILTINS"]).BUILTINS:
        total = kb.binary("add", total, builtin(name))
    kb.emit(ops.SyncCube())
    kb.emit(ops.SyncPlane())
    kb.emit(ops.SyncProxyShared())
    kb.store(out, builtin("absolute_pos"), total)
    compile_checked(kb.build())


@pytest.mark.parametrize("elem", INTS, ids=_ids(INTS))
def test_control_flow_family(elem):
    """if / if_else / switch / range loops (constant +, constant -, runtime step) / loop + break / continue."""
    kb = KernelBuilder(f"control_{elem.name}")
    data = kb.array(T(elem), "data")
    step = kb.scalar(T(elem), "step")
    pos = builtin("absolute_pos")
    acc = kb.mut(T(elem))
    kb.assign(acc, lit(0, elem))
    with kb.range_loop(lit(0, elem), lit(10, elem)) as i:
        kb.assign(acc, kb.binary("add", acc, i))
    with kb.range_loop(lit(10, elem), lit(0, elem), lit(-1, elem), inclusive=True) as i:
        kb.assign(acc, kb.binary("bitxor", acc, i))
    with kb.range_loop(lit(0, elem), lit(20, elem), step) as i:
        skip = kb.compare("eq", i, lit(3, elem))
        with kb.if_(skip):
            kb.emit(branch.Continue())
        kb.assign(acc, kb.binary("sub", acc, i))
    with kb.loop():
        done = kb.compare("ge", acc, lit(5, elem))
        with kb.if_(done):
            kb.emit(branch.Break())
        kb.assign(acc, kb.binary("add", acc, lit(1, elem)))
    with kb.scope() as then_body:
        kb.store(data, pos, acc)
    with kb.scope() as else_body:
        kb.emit(branch.Return())
        kb.store(data, pos, lit(1, elem))
    kb.emit(branch.IfElse(kb.compare("lt", acc, lit(100, elem)), Scope(tuple(then_body)), Scope(tuple(else_body))))
    with kb.scope() as case0:
        kb.store(data, pos, lit(7, elem))
    with kb.scope() as case1:
        kb.store(data, pos, lit(8, elem))
    with kb.scope() as default:
        pass
    kb.emit(branch.Switch(acc, ((0, Scope(tuple(case0))), (-1, Scope(tuple(case1)))), Scope(tuple(default))))
    compile_checked(kb.build())


@pytest.mark.parametrize("arch, instruction", [("sm_90a", "elect.sync"), ("sm_80", "activemask")])
def test_plane_elect_per_architecture(arch, instruction):
    """elect.sync exists from sm_90 on; before, the lowest active lane of activemask is elected.

    The elect sits under a per-unit condition, so the active mask is not known to be full.
    """
    kb = KernelBuilder(f"elect_{arch}")
    out = kb.array(T(BOOL), "out")
    pos = builtin("absolute_pos")
    with kb.if_(kb.compare("lt", pos, lit(5, U32))):
        kb.store(out, pos, kb.emit(ops.PlaneElect(), T(BOOL)))
    ptx = compile_checked(kb.build(), arch).ptx
    assert instruction in ptx
    if arch == "sm_80":
        assert "elect.sync" not in ptx


@pytest.mark.parametrize("arch", ["sm_75", "sm_80"])
@pytest.mark.parametrize("elem", [F16, BF16], ids=["f16", "bf16"])
def test_half_types_on_older_architectures(arch, elem, monkeypatch):
    """Before sm_90 LLVM legalizes bf16 (and some f16) arithmetic and atomics differently; ptxas accepts it."""
    from . import conftest
    from . import test_op_families as families

    monkeypatch.setattr(families, "compile_checked", lambda definition: conftest.compile_checked(definition, arch))
    families.test_binary_and_compare_family(elem, 2)
    families.test_atomic_family(elem, "global")
    families.test_plane_family(elem, 2)
