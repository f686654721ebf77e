"""``@cp.autotune``: call counts on first use and after, re-tuning per key and client, failures, the off switch,
the log line, and choices that persist across processes as validated JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import cubepy as cp
from cubepy import config
from cubepy.errors import CubeError, LaunchError

ROOT = Path(__file__).resolve().parents[2]
SLOW_MS = 30.0  # far above a fast call, even on a busy machine


@pytest.fixture
def cache(tmp_path):
    """An empty cache folder of the test's own."""
    with config.override(CUBEPY_CACHE_DIR=str(tmp_path / "cache")):
        yield tmp_path / "cache"


def _counting_op(calls: Counter, *, warmup: int = 1, repeat: int = 2, fail_on: int | None = None):
    """A launcher whose config ``speed`` 0 is the fastest, 2 slower and 1 the slowest; ``fail_on`` raises."""

    @cp.autotune(
        configs=[{"speed": 1}, {"speed": 0}, {"speed": 2}],
        key=lambda n, tag="": (n, tag),
        warmup=warmup,
        repeat=repeat,
    )
    def op(client, n, tag="", *, speed):
        calls[speed] += 1
        if speed == fail_on:
            raise CubeError(f"config {speed} needs more shared memory than {n}")
        if speed:
            time.sleep(SLOW_MS * (2 if speed == 1 else 1) / 1e3)
        return ("result", n, speed)

    return op


def test_first_call_times_every_config_then_calls_the_fastest(cache):
    calls: Counter = Counter()
    op = _counting_op(calls)  # warmup 1 + repeat 2 = 3 calls per config, then 1 call of the chosen one
    client = cp.client("interp")
    assert op(client, 8) == ("result", 8, 0)
    assert calls == {1: 3, 0: 3 + 1, 2: 3}
    assert op.best(client, 8) == {"speed": 0}
    assert op.failures == []


def test_later_calls_reuse_the_choice_without_timing(cache):
    calls: Counter = Counter()
    op = _counting_op(calls)
    client = cp.client("interp")
    op(client, 8)
    calls.clear()
    for _ in range(3):
        assert op(client, 8) == ("result", 8, 0)
    assert calls == {0: 3}
    assert op.best(client, 8) == {"speed": 0}
    assert calls == {0: 3}, "best() of a known key must not call the launcher"


def test_a_new_key_or_client_tunes_again(cache):
    calls: Counter = Counter()
    op = _counting_op(calls, warmup=0, repeat=1)
    interp = cp.client("interp")
    op(interp, 8)
    assert calls == {1: 1, 0: 2, 2: 1}
    calls.clear()
    op(interp, 16)  # another key
    assert calls == {1: 1, 0: 2, 2: 1}
    calls.clear()
    op(interp, 8, "other")  # the key sees every positional argument given
    assert calls == {1: 1, 0: 2, 2: 1}
    calls.clear()
    op(cp.client("cpu"), 8)  # another client (and runtime)
    assert calls == {1: 1, 0: 2, 2: 1}
    calls.clear()
    op(interp, 16)
    assert calls == {0: 1}


def test_best_tunes_a_new_key(cache):
    calls: Counter = Counter()
    op = _counting_op(calls, warmup=0, repeat=1)
    client = cp.client("interp")
    assert op.best(client, 4) == {"speed": 0}
    assert calls == {1: 1, 0: 1, 2: 1}  # timed once each, no result call
    assert op(client, 4) == ("result", 4, 0)
    assert calls == {1: 1, 0: 2, 2: 1}


def test_failures_are_recorded_with_their_reason_and_skipped(cache):
    calls: Counter = Counter()
    op = _counting_op(calls, fail_on=0)
    client = cp.client("interp")
    assert op(client, 8) == ("result", 8, 2)
    assert calls == {1: 3, 0: 1, 2: 3 + 1}  # the failing config stops at its first call
    assert len(op.failures) == 1
    failure = op.failures[0]
    assert failure.config == {"speed": 0}
    assert failure.reason == "CubeError: config 0 needs more shared memory than 8"
    assert failure.key == '[8,""]' and failure.device == "interp"
    config_, reason, *_ = failure  # a tuple too
    assert config_ == {"speed": 0} and "shared memory" in reason


def test_every_config_failing_is_an_error_naming_each_reason(cache):
    @cp.autotune(configs=[{"x": 1}, {"x": 2}], warmup=0, repeat=1)
    def op(client, *, x):
        raise LaunchError(f"cube_dim {x} is too big")

    with pytest.raises(CubeError, match="every autotuned config failed") as info:
        op(cp.client("interp"))
    assert "cube_dim 1 is too big" in str(info.value) and "cube_dim 2 is too big" in str(info.value)
    assert [f.config for f in op.failures] == [{"x": 1}, {"x": 2}]


def test_the_off_switch_takes_the_first_config(cache):
    calls: Counter = Counter()
    op = _counting_op(calls)
    client = cp.client("interp")
    with config.override(CUBEPY_AUTOTUNE=False):
        assert op(client, 8) == ("result", 8, 1)
        assert op.best(client, 8) == {"speed": 1}
    assert calls == {1: 1}
    assert not cache.exists() or not any(cache.rglob("*.json"))


def test_the_off_switch_reads_the_environment(tmp_path):
    script = tmp_path / "off.py"
    script.write_text(
        textwrap.dedent(
            """
            import cubepy as cp
            calls = []

            @cp.autotune(configs=[{"x": 1}, {"x": 2}])
            def op(client, *, x):
                calls.append(x)

            op(cp.client("interp"))
            print(calls)
            """
        )
    )
    env = dict(os.environ, CUBEPY_AUTOTUNE="0", CUBEPY_CACHE_DIR=str(tmp_path / "cache"))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[1]"


def test_one_log_line_per_tuning(cache, capsys):
    calls: Counter = Counter()
    op = _counting_op(calls, warmup=0, repeat=1, fail_on=2)
    client = cp.client("interp")
    with config.override(CUBEPY_DEBUG=1):
        op(client, 8)
        op(client, 8)
        op(client, 9)
    lines = [line for line in capsys.readouterr().err.splitlines() if "autotune" in line]
    assert len(lines) == 2, lines
    assert 'key=[8,""]' in lines[0] and "{'speed': 0}" in lines[0] and "3 configs, 1 failed" in lines[0]


def test_the_choice_is_stored_as_json_and_read_back(cache):
    calls: Counter = Counter()
    op = _counting_op(calls, warmup=0, repeat=1)
    client = cp.client("interp")
    op(client, 8)
    files = list(cache.rglob("*.json"))
    assert len(files) == 1 and files[0].parent.parent.name == "autotune"
    stored = json.loads(files[0].read_text())
    assert stored["choice"] == 1 and stored["key"] == '[8,""]'
    assert stored["runtime"] == "interp" and stored["device"] == "interp"
    assert stored["launcher"].startswith(f"{__name__}._counting_op.<locals>.op@")
    op.reset()  # this process forgets; the file answers
    calls.clear()
    op(client, 8)
    assert calls == {0: 1}


@pytest.mark.parametrize(
    "damage",
    [
        lambda text: text[: len(text) // 2],  # truncated
        lambda text: "[1, 2]",  # not an object
        lambda text: text.replace('"choice": 1', '"choice": 7'),  # no such config
        lambda text: text.replace('"choice": 1', '"choice": "1"'),  # not an int
        lambda text: text.replace('"runtime": "interp"', '"runtime": "cpu"'),  # about another runtime
        lambda text: "\x00\xff garbage",
    ],
)
def test_a_malformed_stored_choice_is_a_miss(cache, damage):
    calls: Counter = Counter()
    op = _counting_op(calls, warmup=0, repeat=1)
    client = cp.client("interp")
    op(client, 8)
    (path,) = cache.rglob("*.json")
    path.write_text(damage(path.read_text()), errors="surrogateescape")
    op.reset()
    calls.clear()
    assert op(client, 8) == ("result", 8, 0)
    assert calls == {1: 1, 0: 2, 2: 1}, "a damaged file must be ignored and the key tuned again"
    assert json.loads(path.read_text())["choice"] == 1  # and rewritten whole


_PERSIST_SCRIPT = """
import json, sys, time
import cubepy as cp

calls = []

@cp.autotune(configs=[{"speed": 1}, {"speed": 0}], key=lambda n: n, warmup=0, repeat=1)
def op(client, n, *, speed):
    calls.append(speed)
    if speed:
        time.sleep(0.03)

op(cp.client("interp"), int(sys.argv[1]))
print(json.dumps(calls))
"""


def test_choices_persist_across_processes(tmp_path):
    module = tmp_path / "tuned_launcher.py"
    module.write_text(_PERSIST_SCRIPT)
    env = dict(os.environ, CUBEPY_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("CUBEPY_AUTOTUNE", None)

    def calls(n: int) -> list[int]:
        done = subprocess.run(
            [sys.executable, str(module), str(n)], capture_output=True, text=True, timeout=60, env=env, cwd=ROOT
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    assert calls(8) == [1, 0, 0]  # tuned: each config once, then the fastest
    assert calls(8) == [0]  # another process: read from the cache folder


def test_an_edited_launcher_is_another_launcher(cache, tmp_path):
    import importlib.util

    def load(name: str, text: str):
        path = tmp_path / f"{name}.py"
        path.write_text(text)
        spec = importlib.util.spec_from_file_location("tuned_launcher", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    first = load("one", _PERSIST_SCRIPT.split("op(cp.client")[0])
    first.op(cp.client("interp"), 8)
    assert first.calls == [1, 0, 0]
    same = load("two", _PERSIST_SCRIPT.split("op(cp.client")[0])
    same.op(cp.client("interp"), 8)
    assert same.calls == [0], "the same source, module and name: the stored choice applies"
    edited = load("three", _PERSIST_SCRIPT.split("op(cp.client")[0].replace("0.03", "0.031"))
    edited.op(cp.client("interp"), 8)
    assert edited.calls == [1, 0, 0]
    assert first.op.identity() == same.op.identity() != edited.op.identity()


def test_bad_uses_are_clear_errors():
    with pytest.raises(CubeError, match="configs is empty"):
        cp.autotune(configs=[])
    with pytest.raises(CubeError, match=r"configs\[1\] must be a dict"):
        cp.autotune(configs=[{"a": 1}, 3])
    with pytest.raises(CubeError, match="must be a list of dicts"):
        cp.autotune(configs={"a": 1})
    with pytest.raises(CubeError, match="key must be a function"):
        cp.autotune(configs=[{"a": 1}], key="n")
    with pytest.raises(CubeError, match="repeat must be an int >= 1"):
        cp.autotune(configs=[{"a": 1}], repeat=0)

    @cp.autotune(configs=[{"a": 1}], key=lambda n: 1 // n)
    def op(client, n, *, a):
        return a

    with pytest.raises(CubeError, match="a are set by the autotuned configs"):
        op(cp.client("interp"), 1, a=2)
    with pytest.raises(CubeError, match="key.*raised ZeroDivisionError"):
        op(cp.client("interp"), 0)


@cp.cube(launch=True)
def _scale(x: cp.Array[cp.f32], out: cp.Array[cp.f32]):
    if cp.ABSOLUTE_POS < x.len():
        out[cp.ABSOLUTE_POS] = x[cp.ABSOLUTE_POS] * 2.0


@cp.autotune(configs=[{"units": 64}, {"units": 4096}, {"units": 128}], key=lambda x: x.shape, warmup=0, repeat=1)
def _scale_op(client, x, *, units):
    out = client.empty(x.shape, np.float32)
    count = (x.shape[0] + units - 1) // units
    _scale.launch(client, cp.CubeCount(count), cp.CubeDim(units), cp.ArrayArg(x), cp.ArrayArg(out))
    return out


def test_a_kernel_launcher_skips_a_cube_shape_the_runtime_refuses(cache):
    client = cp.client("cpu")
    values = np.arange(300, dtype=np.float32)
    out = _scale_op(client, client.create(values))
    np.testing.assert_array_equal(client.read(out), values * 2)
    assert [f.config for f in _scale_op.failures] == [{"units": 4096}]
    assert "LaunchError" in _scale_op.failures[0].reason
    assert _scale_op.best(client, client.create(values)) in ({"units": 64}, {"units": 128})
    assert _scale_op.failures[0].device.startswith("cpu")


def test_without_a_cache_folder_choices_stay_in_memory(tmp_path):
    calls: Counter = Counter()
    op = _counting_op(calls, warmup=0, repeat=1)
    client = cp.client("interp")
    with config.override(CUBEPY_CACHE_DIR="off"):
        op(client, [1, 2])  # a list key: compared by its text
        op(client, [1, 2])
    assert calls == {1: 1, 0: 3, 2: 1}
    assert not list(tmp_path.rglob("*.json"))
