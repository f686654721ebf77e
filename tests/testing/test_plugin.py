"""cubepy's pytest plugin, run in inner pytest sessions: the client fixture, its sanitizer and its options."""

from __future__ import annotations

import os
import textwrap

import numpy as np
import pytest

import cubepy as cp
from cubepy import UNIT_POS, Array, cube, f32

# The inner sessions run on the interp whatever CUBEPY_TEST_RUNTIME says (the device check sets it to cuda);
# a later --cubepy-runtimes on a command line wins.
PLUGIN = ("-p", "cubepy.testing.plugin", "--cubepy-runtimes=interp")

# A kernel that forgets the sync_cube between a shared write and another unit's read: CUDA lets it race,
# lockstep execution hides it, only the sanitizer sees it.
RACY_TESTS = textwrap.dedent("""
    import numpy as np
    import pytest

    import cubepy as cp
    from cubepy import UNIT_POS, Array, cube, f32


    @cube(launch=True)
    def shift(out: Array[f32]):
        tile = cp.SharedMemory[f32](32)
        tile[UNIT_POS] = f32(UNIT_POS)
        out[UNIT_POS] = tile[(UNIT_POS + 1) % 32]


    def launch(client):
        out = client.zeros((32,), np.float32)
        shift.launch(client, 1, 32, cp.ArrayArg(out))
        return client.read(out)


    def test_default(client):
        launch(client)


    @pytest.mark.cubepy_sanitize(False)
    def test_marked_off(client):
        assert client.sanitize is False
        launch(client)


    @pytest.mark.races_by_design
    def test_races_by_design(client):
        launch(client)
""")


@pytest.fixture(autouse=True, scope="module")
def _launch_path_imported():
    """Launch once before the inner sessions: pytester drops the modules an inner run imports when it ends, and
    a lazily imported module (llvmlite, the interp) imported again would no longer match the classes cubepy holds."""
    client = cp.client("interp", sanitize=True)
    fill.launch(client, 1, 32, cp.ArrayArg(client.zeros((32,), np.float32)))


@cube(launch=True)
def fill(out: Array[f32]):
    out[UNIT_POS] = f32(1)


def outcomes(reprec) -> dict[str, str]:
    """test name -> "passed", "skipped" or "failed", from an inline run."""
    passed, skipped, failed = reprec.listoutcomes()
    return {
        report.nodeid.split("::")[-1]: outcome
        for outcome, reports in (("passed", passed), ("skipped", skipped), ("failed", failed))
        for report in reports
    }


def test_the_sanitizer_is_on_by_default_and_off_per_test(pytester: pytest.Pytester):
    pytester.makepyfile(test_racy=RACY_TESTS)
    reprec = pytester.inline_run(*PLUGIN)
    assert outcomes(reprec) == {"test_default": "failed", "test_marked_off": "passed", "test_races_by_design": "passed"}
    failure = reprec.getfailures()[0]
    assert "SanitizerError" in failure.longreprtext and "data race" in failure.longreprtext


def test_the_sanitizer_can_be_turned_off_for_a_run(pytester: pytest.Pytester):
    pytester.makepyfile(
        test_racy=RACY_TESTS,
        test_marked_on=(
            "import pytest\n\n@pytest.mark.cubepy_sanitize(True)\ndef test_on(client):\n    assert client.sanitize\n"
        ),
    )
    result = pytester.runpytest(*PLUGIN, "-v", "--cubepy-sanitize=off")
    result.assert_outcomes(passed=4)  # the marker wins over the option


def test_cubepy_sanitize_env_skips_tests_that_refuse_the_sanitizer(pytester: pytest.Pytester, monkeypatch):
    monkeypatch.setenv("CUBEPY_SANITIZE", "1")
    pytester.makepyfile(test_racy=RACY_TESTS)
    result = pytester.runpytest(*PLUGIN, "-v", "-rs", "-k", "races_by_design or marked_off")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["*races on purpose*"])
    result.stdout.fnmatch_lines(["*marked cubepy_sanitize(False), but CUBEPY_SANITIZE sanitizes every launch*"])


def test_one_runtime_keeps_test_names_and_several_parametrize(pytester: pytest.Pytester, monkeypatch):
    monkeypatch.delenv("CUBEPY_TEST_RUNTIME", raising=False)
    pytester.makepyfile(test_names="def test_name(client):\n    assert client.name == 'interp'\n")
    single = pytester.runpytest(*PLUGIN, "-v", "--cubepy-runtimes=interp")
    single.stdout.fnmatch_lines(["*test_names.py::test_name PASSED*"])
    several = pytester.runpytest(*PLUGIN, "-v", "-rs", "--cubepy-runtimes=interp,cuda")
    several.stdout.fnmatch_lines(["*test_name?interp? PASSED*"])
    if "cuda" in cp.runtimes():
        several.stdout.fnmatch_lines(["*test_name?cuda? FAILED*"])  # the test itself insists on interp
    else:
        several.stdout.fnmatch_lines(["*test_name?cuda? SKIPPED*", "*runtime 'cuda' is not available here*"])


def test_the_runtime_env_variable_selects_runtimes(pytester: pytest.Pytester, monkeypatch):
    monkeypatch.setenv("CUBEPY_TEST_RUNTIME", "interp")
    pytester.makepyfile(test_names="def test_name(client):\n    assert client.name == 'interp'\n")
    result = pytester.runpytest("-p", "cubepy.testing.plugin", "-v")
    result.stdout.fnmatch_lines(["*test_names.py::test_name PASSED*"])


def test_unknown_runtime_is_a_usage_error(pytester: pytest.Pytester):
    pytester.makepyfile(test_names="def test_name(client):\n    pass\n")
    result = pytester.runpytest(*PLUGIN, "--cubepy-runtimes=interp,rocm")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--cubepy-runtimes: unknown runtime(s) rocm*"])


def test_bad_schedule_is_a_usage_error(pytester: pytest.Pytester):
    pytester.makepyfile(test_names="def test_name(client):\n    pass\n")
    result = pytester.runpytest(*PLUGIN, "--cubepy-schedule=random:x")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--cubepy-schedule=random:x: expected lockstep, random, random:SEED*"])


def test_schedule_reaches_the_interp_client(pytester: pytest.Pytester):
    pytester.makepyfile(
        test_names="def test_name(client):\n    assert client.name == 'interp'\n"
        "    assert client.schedule.describe() == 'random:3'\n"
    )
    result = pytester.runpytest(*PLUGIN, "--cubepy-runtimes=interp", "--cubepy-schedule=random:3")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["cubepy interp schedule: random:3"])


MISSING_SYNC_TESTS = textwrap.dedent("""
    import numpy as np

    import cubepy as cp
    from cubepy import UNIT_POS, Array, cube, f32


    @cube(launch=True)
    def shift(out: Array[f32]):
        tile = cp.SharedMemory[f32](64)
        tile[UNIT_POS] = f32(UNIT_POS)
        out[UNIT_POS] = tile[(UNIT_POS + 32) % 64]  # no sync_cube: plane 0 reads what plane 1 writes


    def test_own_client():
        client = cp.client("interp")  # names no schedule: CUBEPY_SCHEDULE, which the option sets
        out = client.zeros((64,), np.float32)
        shift.launch(client, 1, 64, cp.ArrayArg(out))
        np.testing.assert_array_equal(client.read(out), (np.arange(64) + 32) % 64)
""")


def test_schedule_reaches_clients_a_test_makes_and_failures_name_it(pytester: pytest.Pytester):
    pytester.makepyfile(test_missing_sync=MISSING_SYNC_TESTS)
    before = os.environ.get("CUBEPY_SCHEDULE")  # the outer run's --cubepy-schedule sets it too
    # lockstep hides the missing barrier (named, since the outer run may have set CUBEPY_SCHEDULE)
    assert pytester.runpytest(*PLUGIN, "--cubepy-schedule=lockstep").ret == pytest.ExitCode.OK
    result = pytester.runpytest(*PLUGIN, "--cubepy-schedule=adversarial")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*ran under the interp schedule adversarial; replay with --cubepy-schedule=adversarial*"]
    )
    assert os.environ.get("CUBEPY_SCHEDULE") == before  # the inner sessions gave the setting back


def test_loading_through_conftest_and_the_command_line_registers_once(pytester: pytest.Pytester):
    # The entry point and `-p` go through the same name, so this is also what an installed cubepy does.
    pytester.makeconftest('pytest_plugins = ["cubepy.testing.plugin"]\n')
    pytester.makepyfile(test_names="def test_name(client):\n    assert client.sanitize is True\n")
    result = pytester.runpytest(*PLUGIN, "--cubepy-runtimes=interp")
    result.assert_outcomes(passed=1)


def test_the_entry_point_names_the_plugin_module():
    from pathlib import Path

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    assert pyproject["project"]["entry-points"]["pytest11"] == {"cubepy.testing.plugin": "cubepy.testing.plugin"}
