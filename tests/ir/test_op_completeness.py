"""Every IR operation x {comptime fold, interp, NVPTX lowering, host lowering}: implemented, or unsupported with a reason.

* comptime fold: the record's ``semantics`` has a function for every element kind the operation admits
  (what the interp runs, ``fold_constants`` and the frontend's fold call), or the operation has effects, or
  its record says why it has none (``no_semantics``);
* interp / NVPTX / host: the back end's op table implements it or declares why not; a lane-wise operation is
  lowered for every element type it admits, and its libdevice call, or on the host its C library call (or the
  host target's own composition), is the one its record names.

A new operation that forgets any of these fails here, naming the operation and the column.
"""

from __future__ import annotations

import ctypes
import ctypes.util

import attrs
import numpy as np
import pytest

import cubepy as cp
from cubepy.compiler.lower import LLVM, lower_kernel
from cubepy.compiler.passes import fold_constants
from cubepy.compiler.targets.host import CPU, HostTarget
from cubepy.compiler.targets.host_math import COMPOSED, c_functions
from cubepy.compiler.targets.nvptx import NvptxTarget
from cubepy.frontend import intrinsics
from cubepy.ir import BF16, BOOL, F16, F32, F64, I8, I32, I64, U8, U32, U64, ElemType, builtin, ops, semantics
from cubepy.ir.ops import OpRecord, OpTable, all_operations
from cubepy.ir.ops.lanewise import Semantics
from cubepy.runtime.interp.registry import INTERP
from tests.irbuild import KernelBuilder, T, lit

FLOATS = (F16, BF16, F32, F64)
INTS = (I8, U8, I32, U32, I64, U64)
KINDS = {"float": FLOATS, "int": INTS, "bool": (BOOL,), "number": FLOATS + INTS}
LANE_WISE = (*ops.UNARY_OPS, *ops.BINARY_OPS, *ops.COMPARE_OPS)
COLUMNS = ("comptime fold", "interp", "nvptx", "host")
TABLES: dict[str, OpTable] = {"interp": INTERP, "nvptx": LLVM, "host": CPU}


def admitted(cls) -> tuple[ElemType, ...]:
    """The element types the operation's first operand may have (compares take every type)."""
    record = cls.RECORD
    if issubclass(cls, ops.Compare):
        return FLOATS + INTS + (BOOL,)
    if cls is ops.Powi:
        return FLOATS
    return KINDS.get(record.operand_kind, ())


def fold_status(cls) -> str | None:
    """None when the operation's semantics cover every kind it admits; else the declared reason ("" if none)."""
    record: OpRecord = cls.RECORD
    if record.semantics is not None:
        missing = [e.name for e in admitted(cls) if record.semantics.function(e) is None]
        return f"no semantics for {', '.join(missing)}" if missing else None
    if not record.pure:
        return "has effects (memory, synchronization or control): nothing to fold"
    return record.no_semantics


def table_status(table: OpTable, cls) -> str | None:
    """None when ``table`` implements the operation, else its declared reason ("" if none)."""
    if table.load().get(cls) is not None:
        return None
    return table.unsupported_reasons.get(cls, "")


def status(cls, column: str) -> str | None:
    """None: implemented; a non-empty string: declared unsupported with that reason; "": missing."""
    return fold_status(cls) if column == "comptime fold" else table_status(TABLES[column], cls)


@pytest.mark.parametrize("column", COLUMNS)
@pytest.mark.parametrize("cls", all_operations(), ids=lambda cls: cls.RECORD.name)
def test_every_operation_is_implemented_or_declared_unsupported(cls, column):
    result = status(cls, column)
    assert result is None or result.strip(), f"op {cls.RECORD.name}: no {column} and no reason declared"
    if column == "comptime fold" and cls in LANE_WISE:
        assert result is None, f"lane-wise op {cls.RECORD.name} must have semantics: {result}"


def test_a_missing_entry_is_reported():
    """The matrix can fail: a pure operation with neither semantics nor a reason, or a kind left out."""

    class Pure:
        RECORD = OpRecord("pure_toy", "toy", pure=True)

    class Partial(ops.Unary):
        RECORD = OpRecord("partial_toy", "toy", operand_kind="number", pure=True, semantics=Semantics(np.abs))

    assert fold_status(Pure) == ""
    assert fold_status(Partial) == "no semantics for i8, u8, i32, u32, i64, u64"
    assert table_status(OpTable("toy"), Pure) == ""


def _sample(elem: ElemType, n: int = 8) -> np.ndarray:
    if elem.is_bool:
        return np.array([True, False] * (n // 2))
    if elem.is_float:
        return np.linspace(0.25, 2.0, n).astype(elem.numpy)
    return np.arange(1, n + 1).astype(elem.numpy)


@pytest.mark.parametrize("cls", [*LANE_WISE, ops.Fma, ops.Clamp], ids=lambda cls: cls.RECORD.name)
def test_the_semantics_run_for_every_admitted_type(cls):
    """The interp's evaluation of every (operation, element type) returns lanes of the result's type."""
    n_operands = 3 if cls in (ops.Fma, ops.Clamp) else (1 if issubclass(cls, ops.Unary) else 2)
    for elem in admitted(cls) if cls not in (ops.Fma, ops.Clamp) else (F32, F64, I32)[: 2 if cls is ops.Fma else 3]:
        args = [_sample(elem) for _ in range(n_operands)]
        if cls is ops.Powi:
            args[1] = np.arange(8, dtype=np.int32)
        with np.errstate(all="ignore"):
            result = np.asarray(semantics.evaluate(cls, elem, *args))
        assert result.shape == (8,), (cls.RECORD.name, elem.name)
        if issubclass(cls, ops.Compare) or cls in (ops.IsNan, ops.IsInf):
            assert result.dtype == np.bool_
        elif cls.RECORD.name in ("count_ones", "leading_zeros", "trailing_zeros", "find_first_set"):
            assert result.dtype == np.uint32
        elif cls is ops.WideRecip:
            assert result.dtype == np.float64
        else:
            assert result.dtype == elem.numpy, (cls.RECORD.name, elem.name, result.dtype)


def _kernel(cls, elem: ElemType):
    kb = KernelBuilder(f"{cls.RECORD.name}_{elem.name}")
    pos = builtin("absolute_pos")
    a = kb.index(kb.array(T(elem)), pos)
    if issubclass(cls, ops.Unary):
        out = kb.unary(cls.RECORD.name, a)
    elif cls is ops.Powi:
        out = kb.emit(ops.Powi(a, kb.index(kb.array(T(I32)), pos)), a.type)
    else:
        out = kb.op(cls.RECORD.name, a, kb.index(kb.array(T(elem)), pos))
    kb.store(kb.array(out.type), pos, out)
    return kb.build()


COMPOSED_NAMES = {f"__nv_{base}{suffix}" for base in COMPOSED for suffix in ("f", "")}


def _host_target(definition):
    from cubepy.compiler.emit_host import host_machine

    machine = host_machine()
    return HostTarget(machine.triple, str(machine.target_data), definition)


def _libm():
    return ctypes.CDLL(ctypes.util.find_library("m"))


@pytest.mark.parametrize("cls", LANE_WISE, ids=lambda cls: cls.RECORD.name)
def test_lane_wise_operations_lower_for_every_admitted_type(cls):
    """NVPTX and host: each admitted element type lowers; math calls are the record's libdevice / C names."""
    record = cls.RECORD
    for elem in admitted(cls):
        definition = _kernel(cls, elem)
        lowered = lower_kernel(definition, NvptxTarget(90))
        host_text = str(lower_kernel(definition, _host_target(definition)).module)
        stepped_by_bits = record.name == "nextafter" and elem in (F16, BF16)  # one ulp of the half type
        if record.libdevice and not stepped_by_bits:
            name = f"__nv_{record.libdevice}{'' if elem is F64 else 'f'}"
            assert name in lowered.libdevice, (record.name, elem.name, lowered.libdevice)
            if record.c_library:
                c_name = f"{record.c_library}{'' if elem is F64 else 'f'}"
                if not (record.name == "exp" and elem is not F64):  # f32 exp is inline arithmetic on the host
                    assert f'@"{c_name}"(' in host_text, (record.name, elem.name)
        # Any other call (float // and % use fmod) is a function some record names, so the host has it too.
        assert lowered.libdevice <= set(c_functions()) | COMPOSED_NAMES, (record.name, elem.name, lowered.libdevice)


@pytest.mark.parametrize("cls", [c for c in all_operations() if c.RECORD.libdevice], ids=lambda c: c.RECORD.name)
def test_every_libdevice_function_has_a_host_form(cls):
    """A record naming a libdevice function names the C library's too (present in libm), or the host composes it."""
    record = cls.RECORD
    if not record.c_library:
        assert record.libdevice in COMPOSED, f"{record.name}: no C library function and no host composition"
        return
    libm = _libm()
    for suffix in ("f", ""):
        assert c_functions()[f"__nv_{record.libdevice}{suffix}"] == record.c_library + suffix
        assert hasattr(libm, record.c_library + suffix), f"libm lacks {record.c_library + suffix}"


# -- the comptime fold column, exercised ------------------------------------------------------------------------
def _literal_operands(cls, elem: ElemType) -> list:
    """Literal operands for a fold: small exact values (a float that every float function accepts)."""
    if elem.is_bool:
        value = True
    elif elem.is_float:
        value = 0.75
    else:
        value = 3
    return [lit(value, elem) for _ in attrs.fields(cls)]  # one per operand field, whatever the class


FOLDABLE = [c for c in all_operations() if c.RECORD.foldable and c.RECORD.semantics is not None]


@pytest.mark.parametrize("cls", FOLDABLE, ids=lambda cls: cls.RECORD.name)
def test_fold_constants_folds_every_foldable_operation(cls):
    """Literal operands of any foldable operation become a literal: the value its semantics compute."""
    elems = [e for e in (F32, F64, I32, U8, BOOL) if e in admitted(cls) or cls in (ops.Fma, ops.Clamp, ops.Cast)]
    for elem in elems:
        if cls is ops.Fma and not elem.is_float or cls is ops.Clamp and elem.is_bool:
            continue
        kb = KernelBuilder(f"fold_{cls.RECORD.name}")
        operands = _literal_operands(cls, elem)
        result_type = T(F64) if cls is ops.Cast else None
        out = kb.emit(cls(*operands), result_type or cls(*operands).result_type())
        kb.store(kb.array(out.type), builtin("absolute_pos"), out)
        folded = fold_constants(kb.build()).body.instructions
        assert [i.operation.RECORD.name for i in folded] == ["index_assign"], (cls.RECORD.name, elem.name)
        with np.errstate(all="ignore"):
            want = semantics.evaluate(
                cls, elem, *(np.asarray(o.value, elem.numpy) for o in operands), result=np.dtype(np.float64)
            )
        assert folded[0].operation.value.value == np.asarray(want).item(), (cls.RECORD.name, elem.name)


@pytest.mark.parametrize("name", intrinsics.RECORD_FUNCTIONS)
def test_every_record_math_function_folds_python_numbers(name):
    """``cp.<name>(x)`` outside a kernel: the record's f64 semantics, a Python float (no KeyError)."""
    x = 1.25 if name == "acosh" else 0.75  # in every function's domain
    got = getattr(cp, name)(x)
    want = semantics.evaluate(ops.lookup(name), F64, np.float64(x))
    # floor, ceil, trunc and round keep Python's meaning on Python numbers (an int, as math.floor gives)
    assert isinstance(got, int if name in ("floor", "ceil", "trunc", "round") else float) and got == float(want)


@pytest.mark.parametrize(
    "cls",
    [c for c in ops.BINARY_OPS if c.RECORD.operand_kind == "float" and hasattr(cp, c.RECORD.name)],
    ids=lambda cls: cls.RECORD.name,
)
def test_every_binary_math_function_folds_python_numbers(cls):
    got = getattr(cp, cls.RECORD.name)(0.75, 2.0)
    assert isinstance(got, float) and got == float(semantics.evaluate(cls, F64, np.float64(0.75), np.float64(2.0)))
