"""cubepy's pytest plugin: a ``client`` fixture on every runtime, with the interp's sanitizer on.

Installed with cubepy (the ``pytest11`` entry point ``cubepy.testing.plugin``); a project whose cubepy is
not installed can load it with ``-p cubepy.testing.plugin`` or ``pytest_plugins = ["cubepy.testing.plugin"]``
in its top-level ``conftest.py`` (both ways together are fine).  Disable it with ``-p no:cubepy.testing.plugin``.

The ``client`` fixture gives a ``ComputeClient``:

- on each runtime of ``--cubepy-runtimes=interp,cpu`` (default: ``CUBEPY_TEST_RUNTIME``, else every runtime
  ``cp.runtimes()`` lists); with more than one the tests that take ``client`` are parametrized, with the
  runtime as the test id (``test_saxpy[interp]``), with one they keep their plain name;
- with the sanitizer on where the runtime has one (the interp): a data race, an uninitialized shared read, a
  divergent barrier or an out-of-bounds access fails the test with a ``SanitizerError``.  Turn it off for one
  test with ``@pytest.mark.cubepy_sanitize(False)``, for a run with ``--cubepy-sanitize=off``;
- with ``--cubepy-schedule=lockstep|random:SEED|adversarial`` given to the interp client.  The option also sets ``CUBEPY_SCHEDULE`` for the run, so
  interp clients a test makes itself (``cp.client("interp")``) follow it too; a failing test's report then
  names the schedule to rerun it with.

``@pytest.mark.lockstep_report("why")`` marks a test that checks the exact report the lockstep schedule gives
for a buggy kernel (its kind, unit or wording); under another ``--cubepy-schedule`` it is skipped with the reason,
since an independent order meets the same bug from another side first.

``@pytest.mark.races_by_design`` marks a test whose kernel races in a way CUDA allows and the test tolerates:
its ``client`` has no sanitizer, and it is skipped when ``CUBEPY_SANITIZE`` turns the sanitizer on for every
launch (so is a test marked ``cubepy_sanitize(False)``).
"""

from __future__ import annotations

import os
from typing import Any, cast

import pytest

import cubepy as cp
from cubepy.errors import CubeError

SANITIZING_RUNTIMES = frozenset({"interp"})  # runtimes whose clients accept sanitize=True
RUNTIMES_ENV = "CUBEPY_TEST_RUNTIME"  # a comma list; what the device check sets to run a suite on the GPU
SCHEDULES = ("lockstep", "random", "adversarial")
_RUNTIMES = pytest.StashKey[list[str]]()
_SCHEDULE = pytest.StashKey[dict[str, Any]]()
_SAVED_ENV = pytest.StashKey[str | None]()
SCHEDULE_ENV = "CUBEPY_SCHEDULE"


def pytest_addoption(parser: pytest.Parser) -> None:
    """The ``--cubepy-*`` command-line options."""
    group = parser.getgroup("cubepy", "cubepy kernels")
    group.addoption(
        "--cubepy-runtimes",
        default=None,
        metavar="NAMES",
        help=f"comma list of runtimes the client fixture runs each test on (default: ${RUNTIMES_ENV}, "
        "else every runtime cubepy.runtimes() lists)",
    )
    group.addoption(
        "--cubepy-sanitize",
        default="on",
        choices=("on", "off"),
        help="the interp sanitizer in clients of the client fixture (default: on; off for one test "
        "with @pytest.mark.cubepy_sanitize(False))",
    )
    group.addoption(
        "--cubepy-schedule",
        default=None,
        metavar="SCHEDULE",
        help="the interp's schedule for clients of the client fixture: lockstep, random:SEED or adversarial",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Register the markers and resolve the runtimes the ``client`` fixture uses."""
    config.addinivalue_line(
        "markers",
        "cubepy_sanitize(on=True): the interp sanitizer of this test's client fixture, on or off (default: on)",
    )
    config.addinivalue_line(
        "markers",
        "races_by_design: the kernel has a data race CUDA allows and the test "
        "tolerates; its client has no sanitizer, and it is skipped when CUBEPY_SANITIZE is set",
    )
    config.addinivalue_line(
        "markers",
        "lockstep_report(reason): the test checks what the lockstep schedule reports for a buggy kernel; "
        "other schedules find the same bug in another order (skipped under --cubepy-schedule other than lockstep)",
    )
    config.stash[_RUNTIMES] = selected_runtimes(config)
    config.stash[_SCHEDULE] = schedule_options(config.getoption("--cubepy-schedule"))
    text = config.getoption("--cubepy-schedule")
    if text:  # clients that name no schedule read CUBEPY_SCHEDULE at each launch
        config.stash[_SAVED_ENV] = os.environ.get(SCHEDULE_ENV)
        os.environ[SCHEDULE_ENV] = text.strip()


def pytest_unconfigure(config: pytest.Config) -> None:
    """Give ``CUBEPY_SCHEDULE`` back its value from before the run (an in-process inner session ends too)."""
    if _SAVED_ENV not in config.stash:
        return
    saved = config.stash[_SAVED_ENV]
    if saved is None:
        os.environ.pop(SCHEDULE_ENV, None)
    else:
        os.environ[SCHEDULE_ENV] = saved


def pytest_report_header(config: pytest.Config) -> str | None:
    """The interp schedule of this run, when ``--cubepy-schedule`` chose one."""
    text = config.getoption("--cubepy-schedule")
    return f"cubepy interp schedule: {text}" if text else None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A failing test's report says which interp schedule (and seed) it ran under, to replay it."""
    outcome = yield
    report = outcome.get_result()
    text = item.config.getoption("--cubepy-schedule")
    if text and report.failed:
        report.sections.append(
            ("cubepy schedule", f"ran under the interp schedule {text}; replay with --cubepy-schedule={text}")
        )


def schedule_options(text: str | None) -> dict[str, Any]:
    """``cp.client`` keywords for ``--cubepy-schedule`` (``random:7`` gives ``schedule="random", seed=7``)."""
    if not text:
        return {}
    name, _, seed = text.strip().partition(":")
    if name not in SCHEDULES or (seed and (name != "random" or not seed.strip().isdigit())):
        raise pytest.UsageError(
            f"--cubepy-schedule={text}: expected lockstep, random, random:SEED (an int) or adversarial"
        )
    return {"schedule": name, "seed": int(seed)} if seed else {"schedule": name}


def selected_runtimes(config: pytest.Config) -> list[str]:
    """The runtimes of ``--cubepy-runtimes``, else of ``CUBEPY_TEST_RUNTIME``, else every available one."""
    text = config.getoption("--cubepy-runtimes") or os.environ.get(RUNTIMES_ENV, "")
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        return list(cp.runtimes())
    known = {"interp", "cpu", "cuda"} | set(cp.runtimes())
    unknown = [name for name in names if name not in known]
    if unknown:
        where = "--cubepy-runtimes" if config.getoption("--cubepy-runtimes") else RUNTIMES_ENV
        raise pytest.UsageError(
            f"{where}: unknown runtime(s) {', '.join(unknown)}; cubepy has "
            f"{', '.join(sorted(known))} (available here: {', '.join(cp.runtimes())})"
        )
    return list(dict.fromkeys(names))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """With several runtimes selected, run every test that takes ``client`` once per runtime."""
    runtimes = metafunc.config.stash.get(_RUNTIMES, None)
    if "client" in metafunc.fixturenames and runtimes and len(runtimes) > 1:
        metafunc.parametrize("client", runtimes, indirect=True, ids=runtimes)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip the tests that refuse the sanitizer when ``CUBEPY_SANITIZE`` sanitizes every launch anyway,
    and the ``lockstep_report`` tests under another schedule."""
    schedule = (config.getoption("--cubepy-schedule") or "lockstep").strip()
    if schedule != "lockstep":
        for item in items:
            marker = item.get_closest_marker("lockstep_report")
            if marker is not None:
                reason = marker.args[0] if marker.args else marker.kwargs.get("reason", "")
                item.add_marker(pytest.mark.skip(reason=f"lockstep_report under {schedule}: {reason}"))
    if os.environ.get("CUBEPY_SANITIZE", "0").strip().lower() in ("", "0", "false", "no", "off"):
        return
    racy = pytest.mark.skip(reason="races on purpose; CUBEPY_SANITIZE would rightly report it")
    unsanitized = pytest.mark.skip(reason="marked cubepy_sanitize(False), but CUBEPY_SANITIZE sanitizes every launch")
    for item in items:
        if item.get_closest_marker("races_by_design") is not None:
            item.add_marker(racy)
        elif _marked_off(item):
            item.add_marker(unsanitized)


def _marked_off(node: pytest.Item) -> bool:
    marker = node.get_closest_marker("cubepy_sanitize")
    return marker is not None and not (bool(marker.args[0]) if marker.args else bool(marker.kwargs.get("on", True)))


def wants_sanitizer(node: pytest.Item) -> bool:
    """Whether a test's ``client`` has the sanitizer: on unless a marker or ``--cubepy-sanitize=off`` says no."""
    if node.get_closest_marker("races_by_design") is not None or _marked_off(node):
        return False
    if node.get_closest_marker("cubepy_sanitize") is not None:
        return True
    return cast(str, node.config.getoption("--cubepy-sanitize")) == "on"


@pytest.fixture
def client(request: pytest.FixtureRequest) -> cp.ComputeClient:
    """A client of the runtime under test (the sanitizer on where the runtime has one, see the module doc)."""
    runtimes = request.config.stash.get(_RUNTIMES, None) or ["interp"]
    name = getattr(request, "param", None) or runtimes[0]
    options: dict[str, Any] = {}
    if name in SANITIZING_RUNTIMES and wants_sanitizer(request.node):
        options["sanitize"] = True
    if name == "interp":
        schedule: dict[str, Any] = request.config.stash.get(_SCHEDULE, {})
        options.update(schedule)
    try:
        return cp.client(name, **options)
    except CubeError as error:
        if name not in cp.runtimes():
            pytest.skip(f"runtime {name!r} is not available here: {error}")
        raise
