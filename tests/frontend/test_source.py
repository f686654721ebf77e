"""Kernels whose source is not in a file: exec'd text, ``python -c``, a Jupyter notebook."""

from __future__ import annotations

import linecache
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from cubepy.errors import ExpandError

ROOT = Path(__file__).resolve().parents[2]

IMPORTS = textwrap.dedent("""
    import numpy as np

    import cubepy as cp
    from cubepy import ABSOLUTE_POS, Array, cube, f32
""")
KERNEL = textwrap.dedent("""
    @cube(launch=True)
    def triple(x: Array[f32]):
        if ABSOLUTE_POS < x.len():
            x[ABSOLUTE_POS] = x[ABSOLUTE_POS] * f32(3)
""")
LAUNCH = textwrap.dedent("""
    client = cp.client("interp")
    data = client.create(np.arange(5, dtype=np.float32))
    triple.launch(client, 1, 32, cp.ArrayArg(data))
    result = client.read(data)
""")
KERNEL_TEXT = IMPORTS + KERNEL + LAUNCH
# A notebook cell that defines a kernel printing from the device (after LAUNCH: `data` holds 0, 3, 6, ...).
PRINTS = textwrap.dedent("""
    @cube(launch=True)
    def show(x: Array[f32]):
        if ABSOLUTE_POS < 3:
            cp.debug_print("data[%u] = %g", ABSOLUTE_POS, x[ABSOLUTE_POS])


    show.launch(client, 2, 2, cp.ArrayArg(data))
""")


def _env() -> dict[str, str]:
    """This checkout first on the path, so subprocesses import the cubepy under test."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))


def test_exec_of_text_registered_in_linecache_launches():
    name = "<cubepy-test-kernels-registered>"
    linecache.cache[name] = (len(KERNEL_TEXT), None, KERNEL_TEXT.splitlines(True), name)
    try:
        namespace: dict = {}
        exec(compile(KERNEL_TEXT, name, "exec"), namespace)
    finally:
        del linecache.cache[name]
    np.testing.assert_array_equal(namespace["result"], np.arange(5, dtype=np.float32) * 3)


def test_exec_of_unregistered_text_says_how_to_fix_it():
    namespace: dict = {}
    with pytest.raises(ExpandError) as info:
        exec(compile(KERNEL_TEXT, "<cubepy-test-kernels-unregistered>", "exec"), namespace)
    error = info.value
    assert error.filename == "<cubepy-test-kernels-unregistered>"
    assert error.lineno == KERNEL_TEXT.splitlines().index("@cube(launch=True)") + 1
    assert "cannot read the source of 'triple'" in error.message
    assert "Define the kernel in a .py file" in error.message
    assert "linecache.cache[name] = (len(text), None, text.splitlines(True), name)" in error.message


def test_python_dash_c_recovers_the_command_line_source(tmp_path):
    run = subprocess.run(
        [sys.executable, "-c", KERNEL_TEXT + "print(result.tolist())"],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[0.0, 3.0, 6.0, 9.0, 12.0]"


def test_python_dash_c_does_not_mistake_exec_text_for_the_command_line(tmp_path):
    # The kernel comes from exec() of other text, also named "<string>": its source is not the command line.
    command = f"exec({KERNEL_TEXT!r})"
    run = subprocess.run(
        [sys.executable, "-c", command], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 1
    assert "ExpandError: <string>:" in run.stderr and "cannot read the source of 'triple'" in run.stderr


def test_a_kernel_in_a_jupyter_notebook_launches_and_prints():
    nbformat = pytest.importorskip("nbformat", reason="the notebook test needs nbformat (the test extra)")
    nbclient = pytest.importorskip("nbclient", reason="the notebook test needs nbclient (the test extra)")
    pytest.importorskip("ipykernel", reason="the notebook test needs ipykernel (the test extra)")
    cells = ["import cubepy\nprint(cubepy.__file__)", IMPORTS, KERNEL, LAUNCH + "print(result.tolist())", PRINTS]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell) for cell in cells])
    nbclient.NotebookClient(
        notebook, timeout=240, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}
    ).execute()
    printed = ["".join(output.get("text", "") for output in cell.outputs).strip() for cell in notebook.cells]
    assert Path(printed[0]).resolve() == ROOT / "cubepy" / "__init__.py"
    assert printed[3] == "[0.0, 3.0, 6.0, 9.0, 12.0]"
    assert printed[4].splitlines() == [
        "[cube (0, 0, 0) unit (0, 0, 0)] data[0] = 0",
        "[cube (0, 0, 0) unit (1, 0, 0)] data[1] = 3",
        "[cube (1, 0, 0) unit (0, 0, 0)] data[2] = 6",
    ]


# ``function_text`` (the kernel identity's source, read without tokenize) against ``inspect.getsourcelines``.


def _decorated_kernel_factory():
    import functools

    def passthrough(fn):
        @functools.wraps(fn)
        def wrapper(*args):
            return fn(*args)

        return wrapper

    @passthrough
    def inner(
        x,
        y,
    ):
        total = x + (
            y  # a multi-line expression ends the body
        )
        return total

    return inner


class _Holder:
    @staticmethod
    def method(a):  # a comment on the def line
        if a:
            return 1
        else:
            return 2


def test_function_text_is_the_source_inspect_reads():
    import inspect

    from cubepy.frontend import source

    functions = [
        _decorated_kernel_factory(),
        _Holder.method,
        _decorated_kernel_factory,
        test_function_text_is_the_source_inspect_reads,
    ]
    for fn in functions:
        assert source.function_text(fn) == "".join(inspect.getsourcelines(inspect.unwrap(fn))[0]), fn.__qualname__
    assert source.function_text(_Holder.method).rstrip().endswith("return 2")


def test_function_text_falls_back_for_lambdas_and_exec_text():
    from cubepy.frontend import source

    square = lambda v: v * v  # noqa: E731 - the case under test
    assert source.function_text(square).strip().startswith("square = lambda")
    name = "<function-text-test>"
    text = "def made(v):\n    return v + 1\n"
    linecache.cache[name] = (len(text), None, text.splitlines(True), name)
    namespace: dict = {}
    exec(compile(text, name, "exec"), namespace)
    assert source.function_text(namespace["made"]) == text
    with pytest.raises(ExpandError, match="cannot read the source"):
        exec(compile("def hidden(v):\n    return v\n", "<not-registered>", "exec"), namespace)
        source.function_text(namespace["hidden"])
