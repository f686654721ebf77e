"""``benchmarks.triton_tutorials``: the table from synthetic SASS, the path without Triton, and one real row."""

from __future__ import annotations

import importlib.util
import math
import sys

import pytest

from benchmarks import triton_tutorials as tt


def _sass(
    instructions: int, loops: list[int], registers: int = 32, local: int = 0, mma_loops: list[int] | None = None
) -> dict:
    return {
        "registers": registers,
        "shared": 0,
        "stack": 0,
        "local": local,
        "instructions": instructions,
        "loops": loops,
        "mma_loops": mma_loops or [],
    }


def _row(tutorial: str, measure: str, mine: dict, free: dict, theirs: dict, fast: dict | None = None) -> dict:
    row = {"tutorial": tutorial, "part": "p", "measure": measure, "target": "sm_90a", "status": "ok"}
    row |= {"cubepy": mine, "unchecked": free, "fastmath": fast or mine, "triton": theirs, "triton_kernel": "k"}
    row["ratio"] = tt.measured(mine, measure) / tt.measured(theirs, measure)
    row["ratio_unchecked"] = tt.measured(free, measure) / tt.measured(theirs, measure)
    row["ratio_fastmath"] = tt.measured(row["fastmath"], measure) / tt.measured(theirs, measure)
    return row


def test_measured_takes_the_largest_loop_or_the_whole_kernel():
    assert tt.measured(_sass(300, [12, 90, 40]), "loop") == 90
    assert tt.measured(_sass(300, [12, 90]), "kernel") == 300
    assert tt.measured(_sass(300, []), "loop") == 300  # no loop: the kernel


def test_measured_mma_loop_takes_the_smallest_loop_with_tensor_core_instructions():
    # a main loop (90) and a masked tail loop (120) issue tensor-core instructions, a copy loop (12) does not
    sass = _sass(400, [12, 90, 120], mma_loops=[90, 120])
    assert tt.measured(sass, "mma_loop") == 90
    assert tt.measured(sass, "loop") == 120
    assert tt.measured(_sass(300, [12]), "mma_loop") == 300  # no tensor-core loop: the kernel


def test_the_table_gives_counts_ratios_and_the_geometric_mean():
    rows = [
        _row("01 vector add", "kernel", _sass(80, []), _sass(60, []), _sass(40, []), _sass(40, [])),
        _row(
            "02 fused softmax",
            "loop",
            _sass(500, [160], 40, 8),
            _sass(400, [120]),
            _sass(300, [80], 30),
            _sass(300, [80]),
        ),
        {"tutorial": "09 persistent matmul", "part": "not ported", "status": "not ported"},
    ]
    table = tt.format_table(rows)
    assert (
        "| 01 vector add | p | sm_90a | kernel | 80 | 60 | 40 | 40 | 2.00 | 1.50 | 1.00 | 32 / 32 | 0 / 0 | none / none |"
        in table
    )
    assert (
        "| 02 fused softmax | p | sm_90a | loop | 160 | 120 | 80 | 80 | 2.00 | 1.50 | 1.00 | 40 / 30 | 8 / 0 | 160 / 80 |"
        in table
    )
    assert "| 09 persistent matmul | not ported |" in table
    # both ratios are 2.0 checked, 1.5 unchecked and 1.0 with fast math: the geometric means are those; the
    # worst is the first 2.00
    assert (
        "over 2 kernels: **2.000** checked, **1.500** unchecked, **1.000** checked with fast math; "
        "worst 2.00 (01 vector add, p)" in table
    )


def test_a_ragged_pairing_shows_both_triton_sizes_and_both_geometric_means():
    ragged = _row("01 vector add", "kernel", _sass(60, []), _sass(60, []), _sass(80, []))
    ragged["triton_tutorial_size"] = _sass(30, [])
    ragged["ratio_tutorial_size"] = 2.0
    plain = _row("07 extern functions", "kernel", _sass(20, []), _sass(20, []), _sass(20, []))
    plain["ratio_tutorial_size"] = 1.0
    table = tt.format_table([ragged, plain])
    assert "| 60 | 60 | 60 | 80 (ragged; 30 at a multiple of 16) | 0.75 |" in table
    assert f"over 2 kernels: **{math.sqrt(0.75):.3f}** checked" in table
    assert f"the checked geometric mean is **{math.sqrt(2.0):.3f}**" in table


def test_ragged_specs_drop_the_multiple_of_16():
    specs = pytest.importorskip("benchmarks.triton_specs", reason="triton is not installed")
    for name in specs.RAGGED:
        whole, ragged = specs.spec(name), specs.spec(name, ragged=True)
        assert whole.attrs != ragged.attrs, name  # an integer lost its tt.divisibility = 16
        assert whole.note != ragged.note, name
    with pytest.raises(KeyError, match="has no ragged size"):
        specs.spec("matmul_kernel", ragged=True)


def test_the_geometric_mean_of_unequal_ratios():
    rows = [
        _row("a", "kernel", _sass(40, []), _sass(40, []), _sass(10, [])),
        _row("b", "kernel", _sass(10, []), _sass(10, []), _sass(10, [])),
    ]
    table = tt.format_table(rows)
    assert f"**{math.sqrt(4.0):.3f}** checked" in table and "worst 4.00 (a, p)" in table


def test_without_triton_the_column_is_skipped_and_cubepy_rows_remain(monkeypatch):
    monkeypatch.setitem(sys.modules, "triton", None)  # import triton now raises ImportError
    monkeypatch.delitem(sys.modules, "benchmarks.triton_tutorial_kernels", raising=False)
    monkeypatch.delitem(sys.modules, "benchmarks.triton_specs", raising=False)
    module, reason = tt.load_triton()
    assert module is None and "triton cannot be imported" in reason
    row = _row("01 vector add", "kernel", _sass(80, []), _sass(60, []), _sass(40, []))
    del row["triton"], row["ratio"], row["ratio_unchecked"], row["ratio_fastmath"]
    table = tt.format_table([row], reason)
    assert "| 01 vector add | p | sm_90a | kernel | 80 | 60 | 80 | - | - | - | - | 32 / - | 0 / - | none / - |" in table
    assert "Triton column skipped: triton cannot be imported" in table
    assert "Geometric mean" not in table


def test_tutorial_modules_are_found_by_file_name(tmp_path):
    for name in ("t07_extern_math.py", "t01_vector_add.py", "helper.py", "t1_bad.py"):
        (tmp_path / name).write_text("")
    assert tt.tutorial_modules(tmp_path) == {
        "01": "examples.triton.t01_vector_add",
        "07": "examples.triton.t07_extern_math",
    }


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
@pytest.mark.skipif(tt.missing_tools() is not None, reason=str(tt.missing_tools()))
def test_one_real_row_against_triton():
    triton_specs, reason = tt.load_triton()
    assert reason is None
    rows = tt.compare(("07",), triton_specs)
    row = next(r for r in rows if r.get("triton_kernel") == "asin_kernel")
    assert row["status"] == "ok"
    # Triton's asin kernel calls libdevice's __nv_asinf: a polynomial, well over 50 instructions
    assert row["triton"]["instructions"] > 50 and row["triton"]["local"] == 0
    assert row["cubepy"]["instructions"] >= row["unchecked"]["instructions"] > 50
    assert row["ratio"] == row["cubepy"]["instructions"] / row["triton"]["instructions"]
