"""Every cubepy setting, read from ``CUBEPY_*`` environment variables through one typed registry.

Each knob is declared once with its type, default and meaning; a bad value raises ``CubeError``
naming the variable and what it accepts.  ``override(**values)`` changes knobs for a block (tests).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import attrs

from cubepy.errors import CubeError


@attrs.frozen
class Knob:
    """One setting: environment variable, parser, default and a one-line meaning."""

    env: str
    parse: Callable[[str], object]
    default: object
    doc: str


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError("expected 0/1, true/false, yes/no or on/off")


def _int(text: str) -> int:
    return int(text.strip())


def _count(text: str) -> int:
    value = int(text.strip())
    if value < 0:
        raise ValueError("expected 0 or a positive count")
    return value


def _dump(text: str) -> frozenset[str]:
    allowed = {"ir", "passes", "llvm", "ptx", "resources"}
    parts = frozenset(p.strip() for p in text.split(",") if p.strip())
    bad = parts - allowed
    if bad:
        raise ValueError(f"unknown stage(s) {sorted(bad)}; allowed: {', '.join(sorted(allowed))}")
    return parts


# Every runtime cubepy has (cubepy.runtime.client.RUNTIMES; this module imports nothing of cubepy's, and a
# test keeps the two lists equal).
RUNTIME_NAMES = ("interp", "cpu", "cuda")


def _runtime(text: str) -> str:
    name = text.strip()
    if name not in RUNTIME_NAMES:
        raise ValueError("expected one of " + ", ".join(repr(n) for n in RUNTIME_NAMES))
    return name


def _target(text: str) -> str:
    name = text.strip()
    if not (name.startswith("sm_") and name[3:].rstrip("a").isdigit()):
        raise ValueError("expected a target such as sm_90a or sm_80")
    return name


def schedule_text(text: str) -> str:
    """``text`` as a canonical interp schedule, ``lockstep``, ``random:SEED`` or ``adversarial`` (else ValueError)."""
    name, colon, seed = text.strip().partition(":")
    name = name.strip() or "lockstep"
    if name not in ("lockstep", "random", "adversarial") or (
        colon and (name != "random" or not seed.strip().isdigit())
    ):
        raise ValueError("expected lockstep, random, random:SEED (a non-negative int) or adversarial")
    return f"{name}:{int(seed)}" if colon else name


def _default_cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "cubepy")


KNOBS: dict[str, Knob] = {
    k.env: k
    for k in (
        Knob("CUBEPY_RUNTIME", _runtime, "interp", "runtime of cp.client() with no name: interp, cpu or cuda"),
        Knob("CUBEPY_TARGET", _target, "sm_90a", "default GPU target of kernel.compile and the cuda runtime"),
        Knob(
            "CUBEPY_DUMP",
            _dump,
            frozenset(),
            "comma list of stages to write for every compiled kernel: ir, passes, llvm, ptx, resources",
        ),
        Knob("CUBEPY_DUMP_DIR", str, "cubepy_dump", "where CUBEPY_DUMP writes (one folder per kernel)"),
        Knob(
            "CUBEPY_CACHE_DIR", str, None, "on-disk kernel cache (default: $XDG_CACHE_HOME/cubepy or ~/.cache/cubepy)"
        ),
        Knob("CUBEPY_DEBUG", _int, 0, "verbosity: 1 launches and cache hits, 2 stage timings"),
        Knob("CUBEPY_SANITIZE", _bool, False, "run the interp runtime's sanitizer on every launch"),
        Knob(
            "CUBEPY_SCHEDULE",
            schedule_text,
            "lockstep",
            "how the interp interleaves planes and lands TMA copies when a client names no schedule: "
            "lockstep, random:SEED or adversarial (docs/runtime/schedules.md)",
        ),
        Knob(
            "CUBEPY_CPU_THREADS",
            _count,
            0,
            "threads a launch on the cpu runtime may use: 0 = one per CPU the process may run on, "
            "1 = the launching thread alone",
        ),
        Knob(
            "CUBEPY_CPU_WIDE_VECTORS",
            _bool,
            True,
            "on CPUs with AVX-512 that LLVM tunes for 256-bit vectors (Intel's), let the cpu runtime's loops use "
            "512-bit ones (0: LLVM's choice)",
        ),
        Knob(
            "CUBEPY_AUTOTUNE",
            _bool,
            True,
            "time the configs of @cp.autotune launchers (0: always take the first config, time nothing)",
        ),
        Knob(
            "CUBEPY_CONTRACT",
            _bool,
            True,
            "fuse one-use a*b+c into fma (one rounding), as nvcc's --fmad=true; "
            "0 keeps every mul and add (a kernel's or compile's contract= wins)",
        ),
        Knob(
            "CUBEPY_FASTMATH",
            _bool,
            False,
            "f32 exp2/exp/log2/log/sin/cos/rsqrt and / may use the GPU's approximate .ftz instructions, as "
            "nvcc's -use_fast_math (a kernel's or compile's fastmath= wins)",
        ),
    )
}

_overrides: dict[str, object] = {}


# os.environ's own storage (kept in sync by os.environ) and its key encoding: a knob read on every launch is
# one dict lookup of a pre-encoded key, not os.environ.get's encode, lookup and decode (0.9 us a read).
_DATA: dict[Any, Any] | None = getattr(os.environ, "_data", None)
ENVIRON: Mapping[Any, Any] = os.environ if _DATA is None else _DATA  # look keys up with ``environ_key``
_ENCODED_KEYS: dict[str, object] = {}


def environ_key(env: str) -> object:
    """``env`` as ``ENVIRON`` holds it (os.environ's encoded key where it keeps its own storage)."""
    key = _ENCODED_KEYS.get(env)
    if key is None:
        key = _ENCODED_KEYS[env] = env if _DATA is None else os.environ.encodekey(env)
    return key


def _environment(env: str) -> str | None:
    raw = ENVIRON.get(environ_key(env))
    return raw if raw is None or _DATA is None else os.environ.decodevalue(raw)


def get(env: str) -> Any:
    """The current value of knob ``env`` (override, then environment, then default); its type is the knob's."""
    knob = KNOBS[env]
    if env in _overrides:
        return _overrides[env]
    raw = _environment(env)
    if raw is None:
        if env == "CUBEPY_CACHE_DIR":
            return _default_cache_dir()
        return knob.default
    try:
        return knob.parse(raw)
    except ValueError as exc:
        raise CubeError(f"{env}={raw!r}: {exc} ({knob.doc})") from None


@contextlib.contextmanager
def override(**values: object) -> Iterator[None]:
    """Set knobs for the duration of a ``with`` block: ``override(CUBEPY_SANITIZE=True)``."""
    unknown = set(values) - set(KNOBS)
    if unknown:
        raise CubeError(f"unknown setting(s) {sorted(unknown)}; known: {', '.join(KNOBS)}")
    saved = dict(_overrides)
    _overrides.update(values)
    try:
        yield
    finally:
        _overrides.clear()
        _overrides.update(saved)


def describe() -> list[tuple[str, str, str]]:
    """(variable, current value, meaning) for every knob, for ``cubepy info`` and the README."""
    rows = []
    for env, knob in KNOBS.items():
        try:
            value = get(env)
        except CubeError as exc:
            value = f"<invalid: {exc}>"
        if isinstance(value, frozenset):
            value = ",".join(sorted(value)) or "(none)"
        rows.append((env, str(value), knob.doc))
    return rows
