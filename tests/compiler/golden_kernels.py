"""The kernels whose unoptimized LLVM IR is pinned as golden text in ``test_golden``."""

from __future__ import annotations

from cubepy.ir import F32, I32, U32, builtin
from tests.irbuild import KernelBuilder, T, lit


def copy_checked():
    """dst[pos] = src[pos] on lines of 4 f32, both accesses bounds-checked."""
    kb = KernelBuilder("copy_checked", locations=False)
    src, dst = kb.array(T(F32, 4), "src"), kb.array(T(F32, 4), "dst")
    pos = builtin("absolute_pos")
    kb.store(dst, pos, kb.index(src, pos, checked=True), checked=True)
    return kb.build()


def floordiv_i32():
    """a[x] = a[x] // divisor with Python's floor semantics and CUDA's division by zero."""
    kb = KernelBuilder("floordiv_i32", locations=False)
    a, divisor = kb.array(T(I32), "a"), kb.scalar(T(I32), "divisor")
    x = builtin("unit_pos_x")
    kb.store(a, x, kb.binary("floordiv", kb.index(a, x), divisor))
    return kb.build()


def strided_sum():
    """a[0] = sum(a[i] for i in range(0, 64, step)) with a runtime (possibly negative) step."""
    kb = KernelBuilder("strided_sum", locations=False)
    a, step = kb.array(T(F32), "a"), kb.scalar(T(I32), "step")
    acc = kb.mut(T(F32))
    kb.assign(acc, lit(0.0, F32))
    with kb.range_loop(lit(0, I32), lit(64, I32), step) as i:
        kb.assign(acc, kb.binary("add", acc, kb.index(a, i)))
    kb.store(a, lit(0, U32), acc)
    return kb.build()


KERNELS = {"copy_checked": copy_checked, "floordiv_i32": floordiv_i32, "strided_sum": strided_sum}
