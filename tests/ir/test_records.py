"""Every IR operation is declared once, by a record that names it and says what it reads and writes."""

from __future__ import annotations

import attrs
import pytest

from cubepy.ir import Variable, ops
from cubepy.ir.ops import GIVEN, all_operations, lookup

OPERATIONS = all_operations()


def test_every_operation_class_in_the_package_is_declared():
    families = (ops.arith, ops.memory, ops.sync, ops.plane, ops.branch, ops.tma, ops.cmma)
    declared = set(OPERATIONS)
    for module in families:
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, ops.Operation) and value.__module__ == module.__name__:
                bases = (ops.Operation, ops.Unary, ops.Binary, ops.Compare, ops.Metadata, ops.AtomicOp, ops.PlaneOp)
                if value not in bases:
                    assert value in declared, f"{value.__qualname__} has no record"


@pytest.mark.parametrize("cls", OPERATIONS, ids=lambda cls: cls.RECORD.name)
def test_record_is_consistent(cls):
    record = cls.RECORD
    assert record.name == record.name.lower() and " " not in record.name
    assert lookup(record.name) is cls
    assert record.doc, f"{record.name} has no doc"
    fields = {field.name: field for field in attrs.fields(cls)}
    for name in record.kind_of + record.same_type + record.reads + record.writes:
        assert name in fields, f"{record.name}: {name!r} is not a field"
    if record.pure:
        assert record.has_result and not record.writes, f"{record.name} is pure but has an effect"
    if record.foldable:
        assert record.pure
    if record.operand_kind != "any":
        assert record.kind_of, f"{record.name} restricts operand kinds without naming an operand"


def test_the_name_is_the_same_everywhere():
    """``inst.op``, ``operation.name`` and the registry key agree (plane ops too)."""
    from cubepy.ir import U32, Instruction, Type, constant

    value = constant(1, Type(U32))
    instruction = Instruction(None, ops.PlaneSum(value))
    assert instruction.op == instruction.operation.name == "plane_sum"
    assert ops.AtomicAdd.RECORD.name == "atomic_add"


def test_result_rules():
    from cubepy.ir import BOOL, F32, I64, U32, Type, constant

    x = constant(1.5, Type(F32, 4))
    assert ops.Exp(x).result_type() == Type(F32, 4)
    assert ops.IsNan(x).result_type() == Type(BOOL, 4)
    assert ops.Lt(x, x).result_type() == Type(BOOL, 4)
    assert ops.CountOnes(constant(3, Type(I64))).result_type() == Type(U32)
    assert ops.Len(Variable(ops.memory.VarKind.GLOBAL, 0, Type(F32))).result_type() == Type(U32)
    assert ops.Cast.RECORD.result is GIVEN and ops.Cast(x).result_type() is None
    assert ops.SyncCube.RECORD.result is None and not ops.SyncCube.RECORD.has_result


def test_effects_are_declared_for_memory_writers():
    assert ops.IndexAssign.RECORD.writes == ("memory",)
    assert ops.Index.RECORD.reads == ("memory",) and ops.Index.RECORD.pure
    assert ops.TmaStore.RECORD.writes == ("tensor_map",) and ops.TmaStore.RECORD.reads == ("smem",)
    assert ops.AtomicLoad.RECORD.writes == () and ops.AtomicStore.RECORD.writes == ("memory",)
    assert not ops.AtomicAdd.RECORD.pure


def test_declaring_a_name_twice_is_refused():
    with pytest.raises(ValueError, match="declared twice"):
        ops.declare(ops.OpRecord("add", "test"))(type("Twice", (ops.Operation,), {}))
