"""``map_child_scopes``: every scope an operation owns is transformed once, in program order."""

from __future__ import annotations

from cubepy.ir import U32, Scope, builtin, ops
from cubepy.ir.ops import branch
from cubepy.ir.scope import child_scopes, map_child_scopes
from tests.irbuild import KernelBuilder, T, lit


def _branches():
    kb = KernelBuilder()
    data = kb.array(T(U32), "data")
    pos = builtin("absolute_pos")
    kb.if_else(kb.compare("lt", pos, lit(4, U32)), lambda: kb.store(data, pos, pos), lambda: kb.sync_cube())
    kb.switch(pos, {1: lambda: kb.store(data, pos, lit(1, U32)), 2: lambda: None}, lambda: kb.sync_cube())
    kb.emit(ops.lookup("len")(data), T(U32))
    operations = [inst.operation for inst in kb.build().body]
    (if_else,) = [o for o in operations if isinstance(o, branch.IfElse)]
    (switch,) = [o for o in operations if isinstance(o, branch.Switch)]
    return if_else, switch, operations[-1]


def test_every_owned_scope_is_transformed_once_in_program_order():
    if_else, switch, length = _branches()
    for operation in (if_else, switch):
        seen: list[Scope] = []
        marker = Scope(())

        def transform(scope: Scope, seen=seen, marker=marker) -> Scope:
            seen.append(scope)
            return marker

        mapped = map_child_scopes(operation, transform)
        assert seen == list(child_scopes(operation))  # what child_scopes finds, in its order
        assert list(child_scopes(mapped)) == [marker] * len(seen)
        assert type(mapped) is type(operation)
    assert isinstance(switch, branch.Switch)
    mapped_switch = map_child_scopes(switch, lambda scope: Scope(()))
    assert [case for case, _ in mapped_switch.cases] == [1, 2]  # the case values stay beside their bodies
    assert mapped_switch.value is switch.value


def test_an_operation_without_scopes_is_returned_as_is():
    length = _branches()[2]
    assert map_child_scopes(length, lambda scope: Scope(())) is length
