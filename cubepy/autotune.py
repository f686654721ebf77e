"""``@cp.autotune``: choose the fastest of several configurations of a host launcher, once per key and client.

A launcher is ``def op(client, *args, **config)``.  The first call for a new ``key(*args)`` on a client
runs every config ``warmup + repeat`` times (each run followed by the runtime's own synchronisation;
the cuda runtime times with its events), keeps the one with the smallest median time, and calls it once
more for the caller's result: ``len(configs) * (warmup + repeat) + 1`` calls of the launcher in all
(a config stops at its first failing call).  Later calls with that key and client call the chosen
config once, without timing.  A config whose call raises is skipped and recorded in ``op.failures``
with its reason.

Choices persist as small JSON files (data only, never pickles) under ``<CUBEPY_CACHE_DIR>/autotune/``,
written atomically and keyed by the launcher's identity (module, qualified name and a hash of its
source), the key, the configs, the runtime and the device; a file that is unreadable, malformed or about
something else is a miss.  ``CUBEPY_AUTOTUNE=0`` always takes the first config (no timing, no files).
``CUBEPY_DEBUG=1`` prints one line per tuning (also sent to the ``cubepy.autotune`` logger).
"""

from __future__ import annotations

import functools
import inspect
import marshal
import sys
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from cubepy import config as settings
from cubepy.errors import CubeError
from cubepy.files import write_atomically
from cubepy.hashing import sha256

__all__ = ["Autotuned", "Failure", "autotune"]

FORMAT = 1  # bump when what a stored choice holds changes


class Failure(NamedTuple):
    """A config that could not run: the config, why (``Type: message``), the key and the runtime/device."""

    config: dict[str, Any]
    reason: str
    key: str
    device: str


def autotune(
    configs: Sequence[dict[str, Any]], key: Callable[..., Any] | None = None, *, warmup: int = 1, repeat: int = 5
) -> Callable[[Callable[..., Any]], Autotuned]:
    """Decorate a launcher ``op(client, *args, **config)`` to run its fastest config for each ``key(*args)``.

    ``key=None`` keeps one choice per client.  ``warmup`` untimed and ``repeat`` timed calls per config.
    """
    checked = _check_configs(configs)
    if key is not None and not callable(key):
        raise CubeError(f"cp.autotune: key must be a function of the launcher's arguments (or None), got {key!r}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise CubeError(f"cp.autotune: warmup must be an int >= 0, got {warmup!r}")
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise CubeError(f"cp.autotune: repeat must be an int >= 1, got {repeat!r}")

    def wrap(fn: Callable[..., Any]) -> Autotuned:
        if not callable(fn):
            raise CubeError(f"cp.autotune decorates a launcher function, got {type(fn).__name__}")
        return Autotuned(fn, checked, key, warmup=warmup, repeat=repeat)

    return wrap


def _check_configs(configs: object) -> list[dict[str, Any]]:
    if isinstance(configs, dict) or not isinstance(configs, Sequence) or isinstance(configs, str):
        raise CubeError(f"cp.autotune: configs must be a list of dicts, got {type(configs).__name__}")
    if not configs:
        raise CubeError("cp.autotune: configs is empty; give at least one dict of keyword arguments")
    for index, entry in enumerate(configs):
        if not isinstance(entry, dict):
            raise CubeError(f"cp.autotune: configs[{index}] must be a dict of keyword arguments, got {entry!r}")
        bad = [name for name in entry if not isinstance(name, str) or not name.isidentifier()]
        if bad:
            raise CubeError(f"cp.autotune: configs[{index}] has keys that are not argument names: {bad!r}")
    return [dict(entry) for entry in configs]


class Autotuned:
    """A launcher with autotuned configs: call it as the launcher; ``best``, ``failures``, ``configs``."""

    def __init__(
        self,
        fn: Callable[..., Any],
        configs: list[dict[str, Any]],
        key: Callable[..., Any] | None,
        *,
        warmup: int,
        repeat: int,
    ) -> None:
        self.fn = fn
        self.configs = configs
        self.key = key
        self.warmup = warmup
        self.repeat = repeat
        self.failures: list[Failure] = []
        # client -> {key text: index of the chosen config}; a client that goes away takes its choices along
        self._chosen: weakref.WeakKeyDictionary[Any, dict[str, int]] = weakref.WeakKeyDictionary()
        self._strong: dict[int, tuple[Any, dict[str, int]]] = {}
        self._lock = threading.RLock()
        self._identity: str | None = None
        self._config_texts = [_canonical(entry) for entry in configs]
        functools.update_wrapper(self, fn)

    def __call__(self, client: Any, *args: Any, **kwargs: Any) -> Any:
        """Run the launcher with the config chosen for ``key(*args)`` on ``client`` (tuning it first if new)."""
        overlap = sorted({name for entry in self.configs for name in entry} & set(kwargs))
        if overlap:
            raise CubeError(f"{self._name()}: {', '.join(overlap)} are set by the autotuned configs; leave them out")
        return self.fn(client, *args, **kwargs, **self.configs[self._choose(client, args, kwargs)])

    def best(self, client: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The config dict chosen for ``key(*args)`` on ``client`` (tuning it now, with these arguments, if new)."""
        return dict(self.configs[self._choose(client, args, kwargs)])

    def reset(self) -> None:
        """Forget this process's choices (the stored files stay) and the recorded failures."""
        with self._lock:
            self._chosen = weakref.WeakKeyDictionary()
            self._strong.clear()
            self.failures.clear()

    # -- choosing ---------------------------------------------------------------------------------------
    def _choose(self, client: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
        """The index of the config chosen for ``key(*args)`` on ``client``: remembered, stored, or tuned now."""
        if not settings.get("CUBEPY_AUTOTUNE"):
            return 0
        key_text = self._key_text(args)
        with self._lock:
            chosen = self._choices_of(client)
            if key_text in chosen:
                return chosen[key_text]
            stored = self._load(client, key_text)
            if stored is not None:
                _debug(2, f"autotune {self._name()} key={key_text} on {_device(client)}: reused {self.configs[stored]}")
            chosen[key_text] = stored if stored is not None else self._tune(client, key_text, args, kwargs)
            return chosen[key_text]

    def _choices_of(self, client: Any) -> dict[str, int]:
        try:
            return self._chosen.setdefault(client, {})
        except TypeError:  # a client without weak references: kept alive by this launcher
            return self._strong.setdefault(id(client), (client, {}))[1]

    def _tune(self, client: Any, key_text: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
        device = _device(client)
        medians: dict[int, float] = {}
        failed = 0
        for index, entry in enumerate(self.configs):
            try:
                times = _time_ms(client, functools.partial(self.fn, client, *args, **kwargs, **entry), self)
            except Exception as exc:  # a config that cannot compile or launch is skipped, with its reason
                failed += 1
                self.failures.append(Failure(dict(entry), f"{type(exc).__name__}: {exc}", key_text, device))
                continue
            medians[index] = _median(times)
        if not medians:
            reasons = "; ".join(f"{f.config}: {f.reason}" for f in self.failures[-failed:])
            raise CubeError(f"{self._name()}: every autotuned config failed for key {key_text} on {device}: {reasons}")
        index = min(medians, key=lambda i: (medians[i], i))  # ties keep the earlier config
        self._store(client, key_text, index, medians)
        message = (
            f"autotune {self._name()} key={key_text} on {device}: chose {self.configs[index]} "
            f"(median {medians[index]:.4g} ms; {len(self.configs)} configs, {failed} failed)"
        )
        _debug(1, message)
        return index

    def _key_text(self, args: tuple[Any, ...]) -> str:
        if self.key is None:
            return "[]"
        try:
            value = self.key(*args)
        except Exception as exc:
            raise CubeError(f"{self._name()}: key(*args) raised {type(exc).__name__}: {exc}") from exc
        return _canonical(value)

    def _name(self) -> str:
        return f"{getattr(self.fn, '__module__', '?')}.{getattr(self.fn, '__qualname__', repr(self.fn))}"

    # -- persistence ------------------------------------------------------------------------------------
    def identity(self) -> str:
        """The launcher's module, qualified name and a hash of its source (its code when the source is unknown)."""
        if self._identity is None:
            try:
                body = inspect.getsource(self.fn).encode()
            except (OSError, TypeError):
                code = getattr(self.fn, "__code__", None)
                body = marshal.dumps(code) if code is not None else repr(self.fn).encode()
            self._identity = f"{self._name()}@{sha256(body).hexdigest()[:16]}"
        return self._identity

    def _record(self, client: Any, key_text: str) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "launcher": self.identity(),
            "key": key_text,
            "configs": self._config_texts,
            "runtime": getattr(client, "name", type(client).__name__),
            "device": _device(client),
        }

    def _path(self, record: dict[str, Any]) -> Path | None:
        from cubepy.runtime.cache import cache_dir

        if any(" at 0x" in text for text in (record["key"], *record["configs"])):
            return None  # a text naming a memory address is not the same in another process
        root = cache_dir()
        if root is None:
            return None
        import json  # here, not at the top: `import cubepy` stays light

        digest = sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()
        return root / "autotune" / digest[:2] / f"{digest}.json"

    def _load(self, client: Any, key_text: str) -> int | None:
        record = self._record(client, key_text)
        path = self._path(record)
        if path is None:
            return None
        import json

        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or any(data.get(name) != value for name, value in record.items()):
            return None
        index = data.get("choice")
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(self.configs):
            return None
        return index

    def _store(self, client: Any, key_text: str, index: int, medians: dict[int, float]) -> None:
        record = self._record(client, key_text)
        path = self._path(record)
        if path is None:
            return
        record["choice"] = index
        record["median_ms"] = {str(i): value for i, value in medians.items()}
        import json

        try:
            write_atomically(path, json.dumps(record, indent=1, sort_keys=True).encode())
        except OSError as exc:  # a read-only or full cache costs the next process a re-tuning, nothing else
            _debug(1, f"autotune {self._name()}: could not store the choice in {path}: {exc}")

    def __repr__(self) -> str:
        return f"<autotuned {self._name()} over {len(self.configs)} configs>"


def _time_ms(client: Any, work: Callable[[], object], op: Autotuned) -> list[float]:
    """Milliseconds of each of ``op.repeat`` calls of ``work`` after ``op.warmup`` untimed ones."""
    timer = getattr(client, "time_ms", None)
    if callable(timer):  # the cuda runtime: events on its stream
        return list(timer(work, repeat=op.repeat, warmup=op.warmup))
    sync = getattr(client, "sync", None) or (lambda: None)
    for _ in range(op.warmup):
        work()
        sync()
    times = []
    for _ in range(op.repeat):
        start = time.perf_counter()
        work()
        sync()
        times.append((time.perf_counter() - start) * 1e3)
    return times


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _device(client: Any) -> str:
    """The runtime and the machine a choice is for: ``cpu/<host target>``, ``cuda/<name> sm_XY``, ``interp``."""
    name = getattr(client, "name", type(client).__name__)
    info = getattr(getattr(client, "device", None), "info", None)
    if info is not None:
        major, minor = getattr(info, "compute_capability", (0, 0))
        return f"{name}/{getattr(info, 'name', '?')} sm_{major}{minor}"
    target = getattr(getattr(client, "backend", None), "disk_cache_target", None)
    return name if target in (None, name) else f"{name}/{target}"


def _canonical(value: Any) -> str:
    """A stable text of a key or config: JSON with sorted keys, tuples as lists, other values by ``repr``."""
    import json

    return json.dumps(_plain(value), sort_keys=True, separators=(",", ":"))


def _plain(value: Any) -> Any:
    if isinstance(value, (str, bool, int, float)) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    item = getattr(value, "item", None)  # numpy scalars
    if callable(item) and getattr(value, "shape", None) == ():
        return _plain(item())
    return repr(value)


def _debug(level: int, message: str) -> None:
    import logging

    logging.getLogger("cubepy.autotune").info(message)
    if settings.get("CUBEPY_DEBUG") >= level:
        print(f"[cubepy] {message}", file=sys.stderr)
