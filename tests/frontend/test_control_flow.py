"""Control flow at expansion: comptime constructs run as Python, runtime ones become IR branches."""

import cubepy.frontend as cp
from cubepy.frontend import UNIT_POS, Array, cube, f32, i32, testing, u32
from cubepy.ir import VarKind


def ops(fn, *specs, **comptime):
    return testing.expand(fn, *specs, **comptime).ops


# -- if ----------------------------------------------------------------------------------------
@cube
def comptime_if(a: Array[f32], flag):
    if flag:
        a[0] = 1.0
    else:
        a[0] = 2.0


def test_comptime_if_leaves_no_branch():
    expansion = testing.expand(comptime_if, Array[f32], flag=True)
    assert expansion.ops == ["index_assign"]
    assert "1.0f32" in expansion.ir and "2.0f32" not in expansion.ir


@cube
def runtime_if(a: Array[f32], x: u32):
    if x > 3:
        a[0] = 1.0
    else:
        a[0] = 2.0


def test_runtime_if_else_becomes_if_else():
    expansion = testing.expand(runtime_if, Array[f32], u32)
    assert expansion.ops == ["gt", "if_else", "index_assign", "index_assign"]


@cube
def constant_condition(a: Array[f32]):
    if cp.runtime(True):
        a[0] = 1.0


def test_runtime_constant_condition_still_folds():
    assert ops(constant_condition, Array[f32]) == ["index_assign"]


@cube
def elif_chain(a: Array[u32], x: u32):
    if x == 0:
        a[0] = 10
    elif x == 1:
        a[0] = 11
    else:
        a[0] = 12


def test_elif_nests_in_the_else_arm():
    expansion = testing.expand(elif_chain, Array[u32], u32)
    assert expansion.ops == ["eq", "if_else", "index_assign", "eq", "if_else", "index_assign", "index_assign"]


@cube
def mutable_promotion(x: u32) -> u32:
    y = x
    if x > 3:
        y = x + 1
    return y


def test_name_assigned_in_runtime_branch_becomes_mutable():
    expansion = testing.expand(mutable_promotion, u32)
    (out,) = expansion.outputs
    assert out.kind is VarKind.MUT
    # the condition, the promotion before the branch, the branch, the assignment inside it
    assert expansion.ops == ["gt", "assign", "if", "add", "assign"]


@cube
def both_arms_bind(x: u32):
    if x > 3:
        t = x + 1
    else:
        t = x * 2
    return t


def test_name_bound_in_every_arm_is_merged():
    expansion = testing.expand(both_arms_bind, u32)
    (out,) = expansion.outputs
    assert out.kind is VarKind.MUT and str(out.type) == "u32"


@cube
def local_only(a: Array[u32], x: u32):
    if x > 3:
        t = x + 1
        a[0] = t


def test_branch_local_names_stay_local():
    expansion = testing.expand(local_only, Array[u32], u32)
    assert "assign" not in expansion.ops


@cube
def python_number_promotion(a: Array[f32], n: u32):
    acc = 0.0
    for i in range(n):
        acc += a[i]
    a[0] = acc


def test_loop_carried_python_number_becomes_typed_mutable():
    expansion = testing.expand(python_number_promotion, Array[f32], u32)
    first = expansion.instructions[0]
    assert first.op == "assign" and first.out.kind is VarKind.MUT and str(first.out.type) == "f32"


@cube
def weak_int_counter(a: Array[u32], n: u32):
    count = 0
    i = 0
    while i < n:
        count += a[i]
        i += 1
    a[0] = count


def test_weak_integers_take_the_type_of_their_uses():
    expansion = testing.expand(weak_int_counter, Array[u32], u32)
    muts = [inst.out for inst in expansion.instructions if inst.out is not None and inst.out.kind is VarKind.MUT]
    assert {str(v.type) for v in muts} == {"u32"}
    assert "cast" not in expansion.ops


@cube
def augmented_mutable(x: u32):
    total = x
    for _ in range(4):
        total += 1
    return total


def test_augmented_assignment_on_a_mutable_is_an_assignment():
    expansion = testing.expand(augmented_mutable, u32)
    assert expansion.ops == ["assign", "range_loop", "add", "assign"]


# -- loops -------------------------------------------------------------------------------------
@cube
def range_loop(a: Array[f32], n: u32):
    for i in range(n):
        a[i] = 0.0


def test_runtime_range_is_a_range_loop():
    expansion = testing.expand(range_loop, Array[f32], u32)
    assert expansion.ops == ["range_loop", "index_assign"]
    loop = expansion.instructions[0].operation
    assert str(loop.index.type) == "u32" and loop.end.kind is VarKind.SCALAR


@cube
def comptime_range_loop(a: Array[f32]):
    for i in range(4):
        a[i] = 0.0


def test_comptime_range_stays_a_runtime_loop():
    assert ops(comptime_range_loop, Array[f32]) == ["range_loop", "index_assign"]


@cube
def unrolled(a: Array[f32]):
    for i in cp.unroll(range(4)):
        a[i] = 0.0


def test_unroll_emits_the_body_per_value():
    expansion = testing.expand(unrolled, Array[f32])
    assert expansion.ops == ["index_assign"] * 4
    assert "range_loop" not in expansion.ir


@cube
def tuple_iteration(a: Array[f32], values):
    for k, v in enumerate(values):
        a[k] = v


def test_comptime_iterables_unroll():
    assert ops(tuple_iteration, Array[f32], values=(1.0, 2.0, 3.0)) == ["index_assign"] * 3


@cube
def negative_step(a: Array[f32], n: u32):
    for i in range(n, 0, -1):
        a[i] = 0.0


def test_negative_step_uses_a_signed_index():
    loop = testing.expand(negative_step, Array[f32], u32).instructions[1].operation
    assert str(loop.index.type) == "i32"


@cube
def while_loop(n: u32):
    i = cp.runtime(0)
    while i < n:
        i += 1
    return i


def test_while_becomes_loop_with_break():
    expansion = testing.expand(while_loop, u32)
    assert expansion.ops[:6] == ["assign", "loop", "lt", "not", "if", "break"]


@cube
def infinite(a: Array[u32], n: u32):
    i = 0
    while True:
        if i >= n:
            break
        a[i] = 1
        i += 1


def test_while_true_is_a_runtime_loop():
    expansion = testing.expand(infinite, Array[u32], u32)
    assert expansion.ops[:5] == ["assign", "loop", "ge", "if", "break"]
    assert "index_assign" in expansion.ops


@cube
def comptime_while(a: Array[u32]):
    i = 0
    while i < 3:
        a[i] = 1
        i += 1


def test_comptime_while_unrolls():
    assert ops(comptime_while, Array[u32]) == ["index_assign"] * 3


@cube
def breaks(a: Array[u32], n: u32):
    for i in range(n):
        if a[i] == 0:
            break
        if a[i] == 1:
            continue
        a[i] = 2


def test_break_and_continue_in_runtime_loops():
    expansion = testing.expand(breaks, Array[u32], u32)
    assert expansion.ops == [
        "range_loop",
        "index",
        "eq",
        "if",
        "break",
        "index",
        "eq",
        "if",
        "continue",
        "index_assign",
    ]


@cube
def unrolled_break(a: Array[u32]):
    for i in cp.unroll(range(8)):
        if i == 2:
            break
        a[i] = 1


def test_break_in_unrolled_loop_is_python_break():
    assert ops(unrolled_break, Array[u32]) == ["index_assign"] * 2


@cube(launch=True)
def early_return(a: Array[u32]):
    if UNIT_POS >= a.len():
        return
    a[UNIT_POS] = 1


def test_return_in_kernel_is_ir_return():
    expansion = testing.expand(early_return, Array[u32])
    assert expansion.ops == ["len", "ge", "if", "return", "index_assign"]


@cube
def value_return(x: u32, flag):
    if flag:
        return x + 1
    return x * 2


def test_return_value_under_comptime_condition():
    assert testing.expand(value_return, u32, flag=True).ops == ["add"]
    assert testing.expand(value_return, u32, flag=False).ops == ["mul"]


# -- expressions ------------------------------------------------------------------------------
@cube
def boolean_ops(x: u32, y: u32):
    return (x > 1 and y > 2) or not (x == y)


def test_and_or_not_on_runtime_bools():
    assert ops(boolean_ops, u32, u32) == ["gt", "gt", "and", "eq", "not", "or"]


@cube
def comptime_short_circuit(x: u32, items):
    return len(items) > 0 and items[0] + x


def test_comptime_left_operand_short_circuits():
    assert testing.expand(comptime_short_circuit, u32, items=()).outputs == (False,)
    assert testing.expand(comptime_short_circuit, u32, items=(3,)).ops == ["add"]


@cube
def ternary(x: f32):
    return 1.0 if x > 0.0 else -1.0


def test_runtime_ternary_is_a_select():
    assert ops(ternary, f32) == ["gt", "select"]


@cube
def comptime_ternary(x: f32, positive):
    return x if positive else -x


def test_comptime_ternary_picks_one_side():
    assert ops(comptime_ternary, f32, positive=True) == []
    assert ops(comptime_ternary, f32, positive=False) == ["neg"]


@cube
def chained(x: u32, y: u32):
    return 0 < x <= y


def test_chained_comparison_joins_with_and():
    # `0 < x` is evaluated by Python as `x > 0`
    assert ops(chained, u32, u32) == ["gt", "le", "and"]


@cube
def unpacking(x: u32):
    a, (b, c) = x, (x + 1, x + 2)
    first, *rest = (a, b, c)
    return first, rest[1]


def test_tuple_unpacking():
    expansion = testing.expand(unpacking, u32)
    assert expansion.ops == ["add", "add"]
    first, last = expansion.outputs
    assert first.kind is VarKind.SCALAR and last == expansion.instructions[1].out


@cube
def snapshot(x: u32):
    y = x
    for _ in range(3):
        y += 1
    z = y
    y += 1
    return z, y


def test_binding_a_mutable_takes_a_snapshot():
    expansion = testing.expand(snapshot, u32)
    z, y = expansion.outputs
    assert z.kind is VarKind.CONST and y.kind is VarKind.MUT


@cube
def helper_add(a, b):
    return a + b


@cube
def calls_helper(x: i32):
    total = x
    if x > 0:
        total = helper_add(total, 5)
    return total


def test_cube_functions_expand_inline():
    assert ops(calls_helper, i32) == ["gt", "assign", "if", "add", "assign"]


@cube
def nested_def(x: u32):
    def twice(v):
        if v > 3:
            return v
        return v * 2

    return twice(2) + x


def test_nested_functions_are_rewritten_too():
    assert ops(nested_def, u32) == ["add"]


@cube
def swap_in_loop(a: u32, b: u32, n: u32):
    for _ in range(n):
        a, b = b, a
    return a, b


def test_tuple_assignment_reads_every_value_before_binding():
    expansion = testing.expand(swap_in_loop, u32, u32, u32)
    body = expansion.instructions[3:]
    # both old values are copied before either mutable is written
    assert [inst.op for inst in body] == ["assign"] * 4
    assert body[0].out.kind is VarKind.CONST and body[1].out.kind is VarKind.CONST


@cube
def recursive(x, n):
    if n == 0:
        return x
    return recursive(x * 2, n - 1)


def test_comptime_recursion_unrolls():
    assert ops(recursive, u32, n=3) == ["mul"] * 3
