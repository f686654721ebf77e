"""The peers' CPU modes running the interp-throughput cases: Triton's interpreter and numba's simulator.

Each runs in its own process (``benchmarks._worker``), because both read their switch at import:
``TRITON_INTERPRET=1`` and ``NUMBA_ENABLE_CUDASIM=1``.  Triton's interpreter wants torch tensors; torch
is not a dependency, so ``NumpyTensor`` gives it the few methods it calls on numpy memory (the data
already lives on the host, so its copies to and from "the device" are no-ops).
"""

from __future__ import annotations

import statistics
import time

import numpy as np

# The sizes of the interp-throughput section (cubepy runs exactly these).
VECTOR_N = 1 << 20
SOFTMAX_ROWS, SOFTMAX_COLS = 1024, 1024
MATMUL_N, MATMUL_TILE = 256, 16
# numba's simulator runs one Python thread per unit: it gets reduced sizes, extrapolated linearly in work.
NUMBA_SIZES = {"vector_add": 1 << 14, "softmax_rows": 16, "matmul": 32}


def _median(fn, repeats: int) -> tuple[float, list[float]]:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples), samples


# ----------------------------------------------------------------------------------------------- Triton


class _TorchDtype:
    def __init__(self, dtype: np.dtype) -> None:
        self.np = dtype
        self.itemsize = dtype.itemsize
        self.name = {"float32": "float32", "float16": "float16", "int32": "int32"}[dtype.name]

    def __str__(self) -> str:
        return f"torch.{self.name}"


class _Storage:
    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def data_ptr(self) -> int:
        return self.array.ctypes.data

    def cpu(self):
        return self

    def copy_(self, other) -> None:
        """The interpreter ran on this very memory: nothing to copy back."""


class NumpyTensor:
    """The torch-tensor methods Triton's interpreter calls, over a numpy array on the host."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array
        self.dtype = _TorchDtype(array.dtype)

    def data_ptr(self) -> int:
        return self.array.ctypes.data

    def untyped_storage(self) -> _Storage:
        return _Storage(self.array)

    def new_empty(self, *_args, **_kwargs):
        return NumpyTensor(self.array)

    def set_(self, *_args):
        return self

    def storage_offset(self) -> int:
        return 0

    def size(self):
        return self.array.shape

    def stride(self):
        return tuple(s // self.array.itemsize for s in self.array.strides)

    def copy_(self, other) -> None:
        pass

    def element_size(self) -> int:
        return self.array.itemsize


def triton_interp(case: str, repeats: int) -> dict:
    """Median seconds of one launch of ``case`` under TRITON_INTERPRET=1 (same sizes as cubepy)."""
    import triton

    from benchmarks import compile_bench

    kernels = compile_bench.triton_kernels()
    rng = np.random.default_rng(0)
    if case == "vector_add":
        n = VECTOR_N
        x, y = np.ones(n, np.float32), np.ones(n, np.float32)
        out = np.zeros(n, np.float32)
        args = [NumpyTensor(x), NumpyTensor(y), NumpyTensor(out)]

        def launch():
            kernels["vector_add"][(n // 1024,)](*args, n, BLOCK_SIZE=1024)

        check = lambda: bool(np.all(out == 2.0))  # noqa: E731
        note = "BLOCK_SIZE=1024"
    elif case == "softmax_rows":
        rows, cols = SOFTMAX_ROWS, SOFTMAX_COLS
        x = rng.standard_normal((rows, cols)).astype(np.float32)
        out = np.zeros_like(x)
        tx, to = NumpyTensor(x), NumpyTensor(out)

        def launch():
            kernels["softmax"][(rows,)](to, tx, cols, cols, cols, BLOCK_SIZE=triton.next_power_of_2(cols))

        def check():
            e = np.exp(x - x.max(axis=1, keepdims=True))
            return bool(np.allclose(out, e / e.sum(axis=1, keepdims=True), atol=1e-5))

        note = "one program per row (the tutorial's fused softmax)"
    elif case in ("matmul", "matmul_tutorial_blocks"):
        n, tile = MATMUL_N, MATMUL_TILE
        bm, bn, bk = (tile, tile, tile) if case == "matmul" else (128, 128, 64)
        a = rng.standard_normal((n, n)).astype(np.float32)
        b = rng.standard_normal((n, n)).astype(np.float32)
        c = np.zeros((n, n), np.float32)
        ta, tb, tc = NumpyTensor(a), NumpyTensor(b), NumpyTensor(c)

        def launch():
            grid = ((n // bm) * (n // bn),)
            kernels["matmul"][grid](
                ta, tb, tc, n, n, n, n, 1, n, 1, n, 1, BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, GROUP_SIZE_M=8
            )

        check = lambda: bool(np.allclose(c, a @ b, atol=1e-2))  # noqa: E731
        note = f"tutorial matmul, fp32, {bm}x{bn}x{bk} blocks" + (" (cubepy's tiles)" if case == "matmul" else "")
    else:
        return {"skipped": f"unknown case {case}"}
    launch()  # the interpreter's first call parses the kernel
    ok = check()
    median, samples = _median(launch, repeats)
    return {"s": median, "samples_s": samples, "correct": ok, "note": note, "version": triton.__version__}


# ----------------------------------------------------------------------------------------------- numba


def _numba_kernels():
    # The kernels live in their own module: the simulator swaps the ``cuda`` *global* of a kernel for
    # its fake module, so ``cuda`` must be a module global there, not a closure variable.
    from benchmarks import _numba_kernels

    return _numba_kernels.KERNELS


def numba_sim(case: str, repeats: int) -> dict:
    """numba's simulator on a reduced size; ``s`` is extrapolated (linearly in work) to cubepy's size."""
    import numba_cuda

    kernels = _numba_kernels()
    rng = np.random.default_rng(0)
    size = NUMBA_SIZES[case]
    if case == "vector_add":
        x, y, out = np.ones(size, np.float32), np.ones(size, np.float32), np.zeros(size, np.float32)

        def launch():
            kernels["vector_add"][size // 256, 256](x, y, out)

        scale = VECTOR_N / size
        check = lambda: bool(np.all(out == 2.0))  # noqa: E731
        shape = f"n={size}"
    elif case == "softmax_rows":
        x = rng.standard_normal((size, SOFTMAX_COLS)).astype(np.float32)
        out = np.zeros_like(x)

        def launch():
            kernels["softmax_rows"][size, 32](x, out)

        scale = SOFTMAX_ROWS / size
        check = lambda: bool(np.all(np.abs(out.sum(axis=1) - 1) < 1e-3))  # noqa: E731
        shape = f"{size}x{SOFTMAX_COLS}"
    elif case == "matmul":
        a = rng.standard_normal((size, size)).astype(np.float32)
        b = rng.standard_normal((size, size)).astype(np.float32)
        c = np.zeros((size, size), np.float32)

        def launch():
            kernels["matmul"][(size // 16, size // 16), (16, 16)](a, b, c)

        scale = (MATMUL_N / size) ** 3
        check = lambda: bool(np.allclose(c, a @ b, atol=1e-3))  # noqa: E731
        shape = f"{size}^3"
    else:
        return {"skipped": f"unknown case {case}"}
    median, samples = _median(launch, repeats)
    return {
        "s": median * scale,
        "measured_s": median,
        "measured_size": shape,
        "scale": scale,
        "correct": check(),
        "extrapolated": True,
        "version": getattr(numba_cuda, "__version__", "?"),
    }
