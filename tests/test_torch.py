"""cubepy kernels as PyTorch operators (``cp.torch.custom_op``): eager, inside torch.compile, and misuse.

The oracle is PyTorch's own arithmetic on the same tensors.  Skipped where PyTorch is not installed.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import cubepy as cp

torch = pytest.importorskip("torch")


@cp.cube(launch=True)
def add_kernel(x: cp.Array[cp.f32], y: cp.Array[cp.f32], out: cp.Array[cp.f32]):
    i = cp.ABSOLUTE_POS
    if i < out.len():
        out[i] = x[i] + y[i]


def add_into(client, x: cp.Handle, y: cp.Handle, out: cp.Handle) -> None:
    count = out.shape[0]
    add_kernel.launch(
        client, cp.CubeCount((count + 63) // 64), cp.CubeDim(64), cp.ArrayArg(x), cp.ArrayArg(y), cp.ArrayArg(out)
    )


def add(client, x: cp.Handle, y: cp.Handle) -> cp.Handle:
    out = client.empty(x.shape, x.dtype)
    add_into(client, x, y, out)
    return out


add_into_op = cp.torch.custom_op("cubepy_tests::add_into", add_into, mutates_args=("out",))
add_op = cp.torch.custom_op("cubepy_tests::add", add)


class AddThenShift(torch.nn.Module):
    """A small module whose forward calls a cubepy kernel between two PyTorch operations."""

    def forward(self, a, b):
        return add_op(a * 2, b) + 1


def test_an_op_that_writes_its_argument_runs_eagerly():
    x, y, out = torch.randn(100), torch.randn(100), torch.empty(100)
    add_into_op(x, y, out)
    assert torch.equal(out, x + y)


def test_an_op_returning_a_new_tensor_runs_eagerly_on_a_non_contiguous_input():
    x = torch.randn(10, 20).t().contiguous().t()[:, 0]  # a strided read-only input is copied to contiguous
    y = torch.randn(10)
    assert torch.equal(add_op(x, y), x + y)


def test_inside_torch_compile_fullgraph_the_results_match_eager():
    module = AddThenShift()
    compiled = torch.compile(module, fullgraph=True, backend="aot_eager")
    x, y = torch.randn(64), torch.randn(64)
    assert torch.equal(compiled(x, y), module(x, y))

    def writes_then_scales(a, b, out):
        add_into_op(a, b, out)
        return out * 3

    eager_out, compiled_out = torch.empty(64), torch.empty(64)
    compiled_fn = torch.compile(writes_then_scales, fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled_fn(x, y, compiled_out), writes_then_scales(x, y, eager_out))
    assert torch.equal(compiled_out, x + y)


@pytest.mark.slow
def test_inside_torch_compile_with_inductor():
    module = AddThenShift()
    x, y = torch.randn(64), torch.randn(64)
    assert torch.equal(torch.compile(module, fullgraph=True)(x, y), module(x, y))


def test_the_runtime_follows_cubepy_runtime_for_cpu_tensors(monkeypatch):
    from cubepy.torch import client_for

    with cp.config.override(CUBEPY_RUNTIME="interp"):
        assert client_for(torch.device("cpu")).name == "interp"
    with cp.config.override(CUBEPY_RUNTIME="cuda"):  # not a host runtime: CPU tensors go to cpu
        assert client_for(torch.device("cpu")).name in ("cpu", "interp")


def test_misuse_is_named():
    def untyped(client, x):
        return None

    with pytest.raises(cp.CubeError, match="parameter 'x' .* has no annotation"):
        cp.torch.custom_op("cubepy_tests::untyped", untyped)
    with pytest.raises(cp.CubeError, match="mutates_args names 'nope'"):
        cp.torch.custom_op("cubepy_tests::typo", add_into, mutates_args=("nope",))


def test_without_torch_the_module_says_how_to_install_it(tmp_path):
    blocker = tmp_path / "torch.py"
    blocker.write_text("raise ImportError('no torch here')\n")
    code = "import cubepy as cp\ntry:\n    cp.torch\nexcept ImportError as e:\n    print(e)\n"
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    assert "pip install torch" in result.stdout, result.stderr[-2000:]
