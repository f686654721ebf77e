"""Reports from new users (issue 33): ``cp.runtime`` loop flags, index counts, ``exec`` sources, text annotations.

This module uses ``from __future__ import annotations`` on purpose: every kernel below has its annotations kept
as text, and ``test_text_annotations_*`` check the cases that broke under it.
"""

from __future__ import annotations

import linecache
import subprocess
import sys

import numpy as np
import pytest

import cubepy as cp
from cubepy import Array, Tensor, f32, u32
from cubepy.errors import ExpandError

RUNTIMES = ["interp", "cpu"]


def _run(runtime: str, kernel, args, cube_dim: int = 1):
    client = cp.client(runtime)
    out = client.zeros((1,), np.float32)
    kernel.launch(client, cp.CubeCount(1), cp.CubeDim(cube_dim), *args(client), cp.ArrayArg(out))
    return float(client.read(out)[0])


# -- item 1: a cp.runtime flag drives a while loop -------------------------------------------------------
@cp.cube(launch=True)
def count_until_bool(n: u32, out: Array[f32]):
    done = cp.runtime(False)
    i = cp.runtime(0)
    while not done:
        i += 1
        if i >= n:
            done = True
    out[0] = f32(i)


@cp.cube(launch=True)
def count_until_int(n: u32, out: Array[f32]):
    more = cp.runtime(1)
    i = cp.runtime(0)
    while more:
        i += 1
        if i >= n:
            more = 0
    out[0] = f32(i)


@cp.cube(launch=True)
def count_until_float(n: u32, out: Array[f32]):
    stop = cp.runtime(0.0)
    i = cp.runtime(0)
    while not stop and i < 100:
        i += 1
        if i >= n:
            stop = 1.0
    out[0] = f32(i)


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("kernel", [count_until_bool, count_until_int, count_until_float])
def test_runtime_literal_flag_makes_a_runtime_while_loop(runtime, kernel):
    # n = 5 iterations, counted by hand: the loop body runs until i reaches n.
    assert _run(runtime, kernel, lambda c: (cp.u32(5),)) == 5.0


@cp.cube
def runtime_true_if(a: Array[f32]):
    if not cp.runtime(False):
        a[0] = 1.0


def test_if_on_a_runtime_literal_still_folds():
    assert cp.testing.expand(runtime_true_if, Array[f32]).ops == ["index_assign"]


# -- item 4: an index count other than the declared rank -------------------------------------------------
TABLE = np.arange(6, dtype=np.float32).reshape(2, 3)


@cp.cube(launch=True)
def tensor_three_indices(t: Tensor[f32], out: Array[f32]):
    out[0] = t[0, 1, 0]


@cp.cube(launch=True)
def tensor_flat_index(t: Tensor[f32], out: Array[f32]):
    out[0] = t[4]


@cp.cube(launch=True)
def shared_one_index(t: Tensor[f32], out: Array[f32]):
    tile = cp.SharedMemory[f32]((2, 3))
    tile[1, 1] = 5.0
    out[0] = tile[4]


@cp.cube(launch=True)
def const_one_index(t: Tensor[f32], out: Array[f32]):
    table = cp.const_array(TABLE)
    out[0] = table[4]


@cp.cube(launch=True)
def local_one_index(t: Tensor[f32], out: Array[f32]):
    cells = cp.LocalArray[f32]((2, 3))
    cells[4] = 1.0
    out[0] = cells[1, 1]


@cp.cube(launch=True)
def shared_slice_is_flat(t: Tensor[f32], out: Array[f32]):
    tile = cp.SharedMemory[f32]((2, 3))
    tile[1, 1] = 5.0
    row = tile[3:6]
    out[0] = row[1]


def _table_arg(client):
    return (cp.TensorArg(client.create(TABLE)),)


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize(
    "kernel, words",
    [
        (tensor_three_indices, "has rank 2: expected 2 indices, got 3"),
        (shared_one_index, "has shape (2, 3): expected 2 indices, got 1"),
        (const_one_index, "has shape (2, 3): expected 2 indices, got 1"),
        (local_one_index, "has shape (2, 3): expected 2 indices, got 1"),
    ],
)
def test_wrong_index_count_is_an_expand_error_at_the_line(runtime, kernel, words):
    with pytest.raises(ExpandError, match=r"test_user_reports.py:\d+") as caught:
        _run(runtime, kernel, _table_arg)
    assert words in str(caught.value)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_documented_flat_forms_agree_on_every_runtime(runtime):
    # A tensor's one index is its item index (the first tutorial's m[row * stride + col]); a slice of a 2-D
    # memory is a flat view: TABLE.ravel()[4] == 4, and item 3 + 1 of the tile is its [1, 1].
    assert _run(runtime, tensor_flat_index, _table_arg) == TABLE.ravel()[4]
    assert _run(runtime, shared_slice_is_flat, _table_arg) == 5.0


# -- item 9: a kernel defined by exec under __main__ ----------------------------------------------------
_RUNNER = '''
"""A cell runner: it execs the text of cells.

Its own source is not the cells' source.
"""
import cubepy as cp

CELL = """
import cubepy as cp
@cp.cube(launch=True)
def cell_kernel(out: cp.Array[cp.f32]):
    out[0] = 7.0
"""
REGISTER = {register}
if REGISTER:
    import linecache
    linecache.cache["cell-1"] = (len(CELL), None, CELL.splitlines(True), "cell-1")
exec(compile(CELL, "cell-1", "exec"), globals())
client = cp.client("interp")
out = client.zeros((1,), "float32")
try:
    cell_kernel.launch(client, cp.CubeCount(1), cp.CubeDim(1), cp.ArrayArg(out))
    print("RESULT", client.read(out)[0])
except Exception as exc:
    print("ERROR", type(exc).__name__, exc)
'''


@pytest.mark.parametrize("register", [False, True])
def test_exec_under_main_reads_no_other_file(tmp_path, register):
    script = tmp_path / "runner.py"
    script.write_text(_RUNNER.replace("{register}", str(register)))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    if register:  # the text registered in linecache is the kernel's source
        assert "RESULT 7.0" in done.stdout
    else:  # no source: said plainly, never a SyntaxError from parsing runner.py
        assert "ERROR ExpandError" in done.stdout and "SyntaxError" not in done.stdout
        assert "cannot read the source of 'cell_kernel'" in done.stdout and "cell-1" in done.stdout


def test_exec_text_registered_in_linecache_is_found_in_process():
    text = "import cubepy as cp\n@cp.cube\ndef twice(x: cp.f32) -> cp.f32:\n    return x * 2.0\n"
    name = "<user-reports-exec-1>"
    linecache.cache[name] = (len(text), None, text.splitlines(True), name)
    namespace: dict = {"__name__": "__main__"}
    exec(compile(text, name, "exec"), namespace)
    assert "mul" in cp.testing.expand(namespace["twice"], f32).ops


# -- item 10: annotations kept as text (this module's future import) -----------------------------------
def _make_kernel(element):
    # `element` appears only in the annotation: Python does not close over it, so only the defining frame has it.
    @cp.cube(launch=True)
    def fill(out: Array[element]):
        out[0] = 3.0

    return fill


def _make_helper_kernel(element):
    @cp.cube
    def twice(x: element) -> element:
        return x + x

    @cp.cube(launch=True)
    def use(out: Array[f32]):
        out[0] = twice(f32(2.5))

    return use


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_text_annotations_of_a_factory_kernel_resolve(runtime):
    assert _run(runtime, _make_kernel(f32), lambda c: ()) == 3.0
    assert _run(runtime, _make_helper_kernel(f32), lambda c: ()) == 5.0
