"""Short-circuit ``and``/``or`` and conditional expressions keep Python's evaluation order at runtime."""

from cubepy.frontend import Array, LocalArray, cube, f32, testing, u32


@cube
def pure_guard(a: Array[f32], i: u32, n: u32):
    return i < n and a[i] > 0.0


def test_pure_right_side_is_evaluated_eagerly():
    # checked global reads cannot fault, so the right side needs no branch
    assert testing.expand(pure_guard, Array[f32], u32, u32, checked=True).ops == ["lt", "index", "gt", "and"]


def test_unchecked_read_is_guarded_by_a_branch():
    expansion = testing.expand(pure_guard, Array[f32], u32, u32, checked=False)
    assert expansion.ops == ["lt", "assign", "if", "index", "gt", "assign"]
    (result,) = expansion.outputs
    assert result.kind.value == "mut"


@cube
def mark(side):
    side[0] = u32(1)
    return False


@cube
def side_effect_or(x: u32):
    side = LocalArray[u32](1)
    side[0] = u32(0)
    return (x != 0) or mark(side)


def test_side_effects_on_the_right_only_run_when_needed():
    ops = testing.expand(side_effect_or, u32).ops
    assert ops == ["index_assign", "ne", "assign", "not", "if", "index_assign", "assign"]


@cube
def impure_ternary(a: Array[f32], i: u32, n: u32):
    return a[i] if i < n else 0.0


def test_conditional_expression_with_an_unsafe_side_branches():
    # unchecked, the read could fault; checked, it runs only where Python runs it too, so that its guard
    # proves it (a literal other side starts the result, and only the taken side assigns)
    for checked in (False, True):
        ops = testing.expand(impure_ternary, Array[f32], u32, u32, checked=checked).ops
        assert ops == ["lt", "assign", "if", "index", "assign"]
