"""The on-disk kernel cache: built artifacts reused across processes, under ``CUBEPY_CACHE_DIR``.

An entry is one pickled artifact (the post-pass ``KernelDefinition`` the interp runtime executes, or
the ``CompiledKernel`` of ``kernel.compile``: IR, LLVM, PTX texts and the cubin) in
``<CUBEPY_CACHE_DIR>/<kind>/<key[:2]>/<key>.pkl``.  The key is a sha256 of:

- cubepy's version and a fingerprint of its installed sources (the path, size and mtime of every
  ``cubepy/**.py``: a changed cubepy never reuses an old entry, even at the same version), the
  Python version and the versions of numpy and attrs (pickle compatibility);
- the kind of artifact and the runtime/target (``interp``, ``sm_90a``, ...);
- ``kernel.identity`` (the source of every cube function the kernel reaches, so editing a callee
  changes it; values without a stable text make it per-process, which disables reuse);
- the cube_dim, the mode (checked or not), whether ``a * b + c`` is contracted, whether f32 math may be approximate
  (``fastmath``), and the compilation arguments' ``repr`` (a repr that
  names a memory address is not stable across processes: such launches are not cached on disk).

Entries are sealed (``cubepy.sealed``): the folder is created ``0700`` and refused (a warning, then
uncached) when another user owns it or group/others may write it; every entry carries a keyed BLAKE2b tag
over its name and payload, made with a random per-folder key kept ``0600`` in the folder, and checked before
a byte of the payload is read.  The payload is a pickle read by an unpickler that resolves only the
artifact classes of cubepy's IR and back ends (attrs classes and enums of ``cubepy.ir``, the compiled
kernel records) and nothing callable beyond them, and the artifact must be the kind's own type.  An entry
that fails any of this (truncated, flipped, planted, from another version, the wrong type) is a miss:
removed and rebuilt, with one line under ``CUBEPY_DEBUG >= 1``.  Writes are atomic (a temporary file, then
``os.replace``), so concurrent processes each see a whole entry or none; two that build the same kernel
both write a valid entry and the last one wins.  ``CUBEPY_CACHE_DIR=off`` (or ``0``/``none``) disables
the cache.
"""

from __future__ import annotations

import enum
import io
import os
import pickle
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs

from cubepy import config
from cubepy.hashing import sha256
from cubepy.ir.types import ElemType as _ElemType
from cubepy.ir.types import Type as _Type
from cubepy.ir.variable import SourceLoc as _SourceLoc
from cubepy.sealed import sealed_folder

FORMAT = 3  # bump when what an entry holds changes
_DISABLED = ("", "0", "off", "none", "false")

_fingerprint: str | None = None


class _Pickler(pickle.Pickler):
    """Pickles IR element types by name, so loading gives back the singletons (code compares them with ``is``).

    Equal item types and source locations are written once: a kernel holds a fresh ``Type`` per variable,
    and each one costs an attrs ``__setstate__`` call when loaded (a fifth of a disk hit's unpickling).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._canonical: dict[object, object] = {}

    def reducer_override(self, obj: Any) -> Any:
        kind = type(obj)
        if kind is _ElemType:
            return (_elem_type, (obj.name,))
        if kind is _Type or kind is _SourceLoc:
            canonical = self._canonical.setdefault(obj, obj)
            if canonical is not obj:
                return (_same, (canonical,))
        return NotImplemented


def _same(value: object) -> object:
    return value


def _elem_type(name: str) -> _ElemType:
    from cubepy.ir.types import ELEM_BY_NAME

    return ELEM_BY_NAME[name]


def _dumps(obj: object) -> bytes:
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return buffer.getvalue()


def install_fingerprint() -> str:
    """A hash of cubepy's version and its source files' paths, sizes and mtimes (computed once per process)."""
    global _fingerprint
    if _fingerprint is None:
        import numpy

        from cubepy.version import __version__

        digest = sha256()
        # (attrs.__version__ is not read: it goes through importlib.metadata, ~35 ms.)
        parts = (__version__, sys.version, numpy.__version__, FORMAT)
        digest.update(repr(parts).encode())
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        entries: list[str] = []
        _source_stats(root, "", entries)
        digest.update("".join(sorted(entries)).encode())
        _fingerprint = digest.hexdigest()
    return _fingerprint


def _source_stats(folder: str, relative: str, entries: list[str]) -> None:
    """Append ``path:size:mtime`` of every ``.py`` file under ``folder`` (scandir: no extra stat per entry kind)."""
    try:
        listing = list(os.scandir(folder))
    except OSError:
        return
    for entry in listing:
        name = relative + entry.name
        if entry.name.endswith(".py"):
            try:
                stat = entry.stat()
            except OSError:
                continue
            entries.append(f"{name}:{stat.st_size}:{stat.st_mtime_ns}\n")
        elif entry.name != "__pycache__" and entry.is_dir(follow_symlinks=False):
            _source_stats(entry.path, name + "/", entries)


def cache_dir() -> Path | None:
    """The cache folder (``CUBEPY_CACHE_DIR``), or None when the cache is disabled."""
    value = config.get("CUBEPY_CACHE_DIR")
    if value is None or str(value).strip().lower() in _DISABLED:
        return None
    return Path(value)


def libdevice_cache_dir() -> Path | None:
    """Where the compiler keeps libdevice subsets (``<CUBEPY_CACHE_DIR>/libdevice``), or None when disabled."""
    root = cache_dir()
    return None if root is None else root / "libdevice"


def entry_key(
    kind: str,
    target: str,
    identity: str,
    cube_dim: Iterable[int],
    checked: bool,
    comp_args: tuple[object, ...],
    contract: bool = True,
    fastmath: bool = False,
) -> str | None:
    """The hex key of one specialization, or None when its compilation arguments have no stable text."""
    comp_text = repr(comp_args)
    if " at 0x" in comp_text or "unstable:" in identity:
        return None
    # The types too: two classes whose reprs coincide must not share an entry.
    comp_text += repr([f"{type(a).__module__}.{type(a).__qualname__}" for a in comp_args])
    text = "\0".join(
        (
            install_fingerprint(),
            kind,
            target,
            identity,
            repr(tuple(cube_dim)),
            repr(bool(checked)),
            comp_text,
            "" if contract else "no-contract",
            # only when on: the keys of kernels without fast math stay what they were
            *(("fastmath",) if fastmath else ()),
        )
    )
    return sha256(text.encode()).hexdigest()


def _debug(message: str) -> None:
    if config.get("CUBEPY_DEBUG") >= 1:
        print(f"[cubepy] disk cache: {message}", file=sys.stderr)


# The classes an entry may name beyond cubepy.ir's attrs classes and enums: each kind's artifact record.
_ARTIFACT_CLASSES = {
    ("cubepy.compiler.compiled", "CompiledKernel"),
    ("cubepy.compiler.emit_host", "HostKernel"),
    ("cubepy.compiler.ptxas", "Resources"),
    ("cubepy.compiler.targets.host_async", "HostCall"),
}
# What each kind's entry must unpickle to (module, class); anything else is a miss.
_ARTIFACT_OF_KIND = {
    "interp": ("cubepy.ir.kernel", "KernelDefinition"),
    "cpu": ("cubepy.compiler.emit_host", "HostKernel"),
    "compile": ("cubepy.compiler.compiled", "CompiledKernel"),
}


class _Unpickler(pickle.Unpickler):
    """Resolves only cubepy's data classes: no function, builtin or foreign class can be reached from an entry."""

    def find_class(self, module: str, name: str) -> object:
        if module == __name__ and name in ("_elem_type", "_same"):
            return globals()[name]
        allowed = module.startswith("cubepy.ir.") or (module, name) in _ARTIFACT_CLASSES
        if allowed and name.isidentifier() and not name.startswith("__"):
            found = getattr(sys.modules.get(module) or _import(module), name, None)
            if isinstance(found, type) and (attrs.has(found) or issubclass(found, enum.Enum)):
                return found
        raise pickle.UnpicklingError(f"a cache entry names {module}.{name}, which is not a cubepy artifact class")


def _import(module: str) -> ModuleType:
    import importlib

    return importlib.import_module(module)


def _loads(payload: bytes) -> Any:  # (key, artifact), as ``store`` pickled them
    return _Unpickler(io.BytesIO(payload)).load()


class DiskCache:
    """Artifacts of one kind (``interp``, ``cpu``, ``compile``) under one sealed root folder."""

    def __init__(self, root: str | os.PathLike[str], kind: str) -> None:
        self.root = Path(root)
        self.kind = kind

    def relative(self, key: str) -> str:
        """Where the entry of ``key`` lives, relative to the root."""
        return f"{self.kind}/{key[:2]}/{key}.pkl"

    def path(self, key: str) -> Path:
        """Where the entry of ``key`` lives."""
        return self.root / self.relative(key)

    def load(self, key: str) -> Any:  # the kind's artifact, or None
        """The artifact stored under ``key``, or None (missing, or failing a check: then it is removed)."""
        folder = sealed_folder(self.root)
        if folder is None:
            return None
        relative = self.relative(key)
        payload = folder.read(relative)
        if payload is None:
            return None
        try:
            stored_key, artifact = _loads(payload)
            if stored_key != key:
                raise ValueError("entry stored under another key")
            expected = _ARTIFACT_OF_KIND.get(self.kind)
            if expected is not None:
                wanted = getattr(_import(expected[0]), expected[1])
                if type(artifact) is not wanted:
                    raise TypeError(f"it holds a {type(artifact).__name__}, not a {wanted.__name__}")
        except Exception as exc:  # from an incompatible version, or not this kind's artifact: rebuild
            folder.discard(relative, f"{type(exc).__name__}: {exc}")
            return None
        _debug(f"hit {self.path(key)}")
        return artifact

    def store(self, key: str, artifact: object) -> bool:
        """Write ``artifact`` under ``key`` atomically; False (and nothing written) when it cannot be."""
        path = self.path(key)
        folder = sealed_folder(self.root)
        if folder is None:
            return False
        try:
            data = _dumps((key, artifact))
        except Exception as exc:  # an artifact holding something unpicklable: keep it in memory only
            _debug(f"not storing {path.name}: {type(exc).__name__}: {exc}")
            return False
        try:
            folder.write(self.relative(key), data)
        except OSError as exc:  # read-only or full disk: the cache is an optimization only
            _debug(f"cannot write {path}: {exc}")
            return False
        _debug(f"stored {path}")
        return True


def for_kind(kind: str) -> DiskCache | None:
    """The cache of ``kind`` under the current ``CUBEPY_CACHE_DIR``, or None when disabled."""
    root = cache_dir()
    return None if root is None else DiskCache(root, kind)


def cached_compile(
    kernel: Any,
    comp_args: tuple[object, ...],
    cube_dim: Iterable[int],
    checked: bool,
    target: str,
    build: Callable[[], object],
    contract: bool = True,
    fastmath: bool = False,
) -> object:
    """``build()`` (a ``CompiledKernel``), or the copy stored on disk for the same kernel and target.

    Not cached while ``CUBEPY_DUMP`` asks for dumps (building writes them).
    """
    store = for_kind("compile")
    if store is None or config.get("CUBEPY_DUMP"):
        return build()
    key = entry_key("compile", target, kernel.identity, cube_dim, checked, comp_args, contract, fastmath)
    if key is None:
        return build()
    compiled = store.load(key)
    if compiled is None:
        compiled = build()
        store.store(key, compiled)
    return compiled


def _install() -> None:
    from cubepy.frontend import hooks

    hooks.install(cached_compile=cached_compile)  # Kernel.compile consults it (see cubepy/frontend/kernel.py)


_install()
