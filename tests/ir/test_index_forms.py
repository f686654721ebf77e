"""``cubepy.ir.index_forms``: trees and polynomials of index expressions, against values worked by hand."""

from __future__ import annotations

from cubepy.ir import Type, Variable, VarKind
from cubepy.ir.index_forms import bit_length, dominates, plus, polynomial, times, tree_add, tree_mul
from cubepy.ir.types import U32

X = Variable(VarKind.SCALAR, 0, Type(U32))
Y = Variable(VarKind.SCALAR, 1, Type(U32))
x, y = ("var", X), ("var", Y)


def test_equal_values_built_in_different_orders_have_one_polynomial():
    # (x + 2) * y + 3 and 3 + y * x + 2 * y
    first = tree_add(tree_mul(tree_add(x, ("const", 2)), y), ("const", 3))
    second = tree_add(tree_add(("const", 3), tree_mul(y, x)), tree_mul(("const", 2), y))
    assert polynomial(first) == polynomial(second)
    assert polynomial(first) == {
        (): 3,
        (("var", VarKind.SCALAR, 1),): 2,
        tuple(sorted([("var", VarKind.SCALAR, 0), ("var", VarKind.SCALAR, 1)], key=repr)): 1,
    }


def test_dominance_compares_coefficients_of_non_negative_leaves():
    big = tree_add(tree_mul(x, ("const", 4)), ("const", 31))  # 4x + 31
    assert dominates(big, tree_add(tree_mul(x, ("const", 4)), ("const", 7)))  # 4x + 7
    assert not dominates(big, tree_add(x, y))  # y is not in big
    assert not dominates(tree_mul(x, ("const", 3)), tree_mul(x, ("const", 4)))


def test_sums_and_products_modulo_two_to_the_32():
    one = {(): 1}
    top = {(): 2**32 - 1}
    assert plus(top, one, modulus=2**32) == {}  # wraps to 0: the term is dropped
    assert plus(top, one) == {(): 2**32}
    assert plus({("x",): 5}, {("x",): 5}, -1, 2**32) == {}
    assert times({("x",): 2**31}, {(): 2}, 2**32) == {}
    assert times({("x",): 3}, {("y",): 5}) == {("x", "y"): 15}


def test_bit_lengths_bound_sums_and_products():
    assert bit_length(("const", 255)) == 8
    assert bit_length(tree_add(x, y)) == 33
    assert bit_length(tree_mul(x, ("const", 16))) == 37
