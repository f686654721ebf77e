"""Index expressions as trees of leaves and as polynomials: the forms two IR passes compare indices in.

A *tree* is how ``cubepy.ir.versioning`` rebuilds an index's scale and offset before a loop, exactly, in
u64: ``("const", n)`` a literal, ``("top", n)`` a per-unit position replaced by its largest value over the
cube, ``("var", v)`` a value defined before the loop, ``("meta", op)`` a buffer metadata read, ``("wrap", t)``
a sum taken modulo 2**32 as the kernel computes it, and ``("add", a, b)`` / ``("mul", a, b)``.

A *polynomial* is ``{sorted leaf keys: coefficient}`` (the empty key holds the constant term): equal values
built in different orders have one form.  ``versioning`` compares offsets as exact polynomials of
non-negative leaves (``dominates``); ``cubepy.ir.store_pairs`` compares indices modulo 2**32 (``plus`` and
``times`` with a modulus).
"""

from __future__ import annotations

from typing import Any

from cubepy.ir.variable import VarKind

Tree = tuple[Any, ...]
Poly = dict[tuple[Any, ...], int]  # sorted leaf keys -> coefficient

# Bit lengths of the largest values of the builtins below 32 bits (CUDA's grid and block limits).
_LEAF_BITS = {
    **{f"cube_{what}_{axis}": 16 for what in ("pos", "count") for axis in "yz"},
    **{name: 11 for name in ("cube_dim", "cube_dim_x", "cube_dim_y", "cube_dim_z")},
    "plane_dim": 6,
}
MAX_TERMS = 64  # a tree's polynomial past this many terms is not built (``polynomial`` gives None)


def tree_add(a: Tree | None, b: Tree | None) -> Tree | None:
    """``a + b`` (None stands for 0)."""
    return b if a is None else a if b is None else ("add", a, b)


def tree_mul(a: Tree | None, b: Tree | None) -> Tree | None:
    """``a * b`` (None stands for 0; a factor of 1 is dropped)."""
    if a is None or b is None:
        return None
    if a == ("const", 1):
        return b
    return a if b == ("const", 1) else ("mul", a, b)


def per_unit(tree: Tree | None) -> bool:
    """Whether a tree holds a per-unit position replaced by its largest value."""
    if tree is None or tree[0] in ("const", "var", "meta"):
        return False
    if tree[0] == "wrap":
        return per_unit(tree[1])
    return tree[0] == "top" or per_unit(tree[1]) or per_unit(tree[2])


def bit_length(tree: Tree) -> int:
    """An upper bound of the bit length of the tree's value (its leaves are at most 32 bits)."""
    kind = tree[0]
    if kind in ("const", "top"):
        return max(int(tree[1]).bit_length(), 1)
    if kind == "var":
        return _LEAF_BITS.get(tree[1].name or "", 32) if tree[1].kind is VarKind.BUILTIN else 32
    if kind in ("meta", "wrap"):
        return 32
    a, b = bit_length(tree[1]), bit_length(tree[2])
    return max(a, b) + 1 if kind == "add" else a + b


def dominates(big: Tree | None, small: Tree | None) -> bool:
    """Whether ``big >= small`` for every value of their leaves: as polynomials of their (non-negative) leaves,
    every coefficient of ``small`` is at most ``big``'s.  The check ``c * scale + offset < length`` of ``big``
    then implies ``small``'s."""
    a, b = polynomial(big), polynomial(small)
    if a is None or b is None:
        return False
    return all(coefficient <= a.get(monomial, 0) for monomial, coefficient in b.items())


def polynomial(tree: Tree | None) -> Poly | None:
    """``tree`` as an exact polynomial of its leaves; None past ``MAX_TERMS`` terms."""
    if tree is None:
        return {}
    kind = tree[0]
    if kind in ("const", "top"):
        return {(): int(tree[1])} if int(tree[1]) else {}
    if kind in ("var", "meta", "wrap"):  # a wrapped sum is a value of its own, not its terms'
        return {(_leaf_key(tree),): 1}
    a, b = polynomial(tree[1]), polynomial(tree[2])
    if a is None or b is None:
        return None
    out = plus(a, b) if kind == "add" else times(a, b)
    return out if len(out) <= MAX_TERMS else None


def _leaf_key(tree: Tree) -> tuple[Any, ...]:
    """A leaf's identity: a variable by kind and id, a metadata read by what it reads."""
    if tree[0] == "var":
        return ("var", tree[1].kind, tree[1].id)
    return (tree[0], repr(tree[1]))


def plus(a: Poly, b: Poly, sign: int = 1, modulus: int | None = None) -> Poly:
    """``a + sign * b`` (modulo ``modulus`` when given); zero terms dropped."""
    out = dict(a)
    for monomial, coefficient in b.items():
        total = out.get(monomial, 0) + sign * coefficient
        out[monomial] = total % modulus if modulus else total
    return {m: c for m, c in out.items() if c}


def times(a: Poly, b: Poly, modulus: int | None = None) -> Poly:
    """``a * b`` (modulo ``modulus`` when given); zero terms dropped."""
    out: Poly = {}
    for ma, ca in a.items():
        for mb, cb in b.items():
            monomial = tuple(sorted(ma + mb, key=repr))
            total = out.get(monomial, 0) + ca * cb
            out[monomial] = total % modulus if modulus else total
    return {m: c for m, c in out.items() if c}
