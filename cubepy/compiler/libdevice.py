"""libdevice: NVIDIA's bitcode math library (``__nv_expf``, ``__nv_pow``, ...), found, cut down and linked.

A kernel links only a *subset*: the libdevice functions it calls and what they call, as a small
bitcode module.  Building one parses the whole library (~350 functions, tens of ms), makes its
definitions ``linkonce_odr`` (so linking pulls in only what is referenced) and links it into a stub
that references just the wanted names; the result is a few KiB.  Subsets are kept per process and,
when the caller names a cache folder (``kernel.compile`` passes ``<CUBEPY_CACHE_DIR>/libdevice``), on
disk as ``<sha256>.bc`` sealed like every cache entry (``cubepy.sealed``), keyed by the libdevice file's content hash, LLVM's version and the sorted
function names: a changed toolkit or function set misses, a later process with the same set parses
a few KiB instead of the library.  Parsing the subset (well under a millisecond) is cheaper than
cloning a parsed module, so callers parse a fresh copy for each link (linking consumes it).
``__nvvm_reflect`` calls inside libdevice are folded by LLVM's NVVMReflect pass, which the NVPTX
target adds to the O3 pipeline.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import attrs

from cubepy.compiler.abi import DATA_LAYOUT, TRIPLE
from cubepy.compiler.llvm_process import binding
from cubepy.compiler.toolkit import find_libdevice
from cubepy.errors import CompileError
from cubepy.hashing import sha256
from cubepy.sealed import sealed_folder

__all__ = ["Subset", "clear_memory", "find_libdevice", "parse", "subset"]

FORMAT = 3  # bump when the way a subset is built or stored changes
# References every wanted function so that linking libdevice into the stub resolves them; linkonce_odr and
# unreferenced, so linking the subset into a kernel leaves it behind.
_KEEP = "__cubepy_libdevice_keep"


@attrs.frozen
class Subset:
    """Bitcode of the wanted libdevice functions and their callees; ``missing`` names libdevice lacks.

    ``origin`` says where it came from: ``built`` (parsed libdevice), ``disk`` or ``memory``.
    """

    bitcode: bytes
    missing: frozenset[str]
    origin: str


_memory: dict[tuple[str, frozenset[str]], Subset] = {}


def subset(
    names: Iterable[str], cache_dir: str | os.PathLike[str] | None = None, path: str | os.PathLike[str] | None = None
) -> Subset | None:
    """The libdevice subset defining ``names`` (from memory, ``cache_dir`` or built), or None without libdevice.

    ``path`` is the libdevice file (default: the toolkit's, ``find_libdevice()``).
    """
    wanted = frozenset(names)
    file = find_libdevice() if path is None else Path(path)
    if file is None:
        return None
    digest = _file_digest(str(file))
    key = (digest, wanted)
    found = _memory.get(key)
    if found is not None:
        return attrs.evolve(found, origin="memory")
    entry = None if cache_dir is None else Path(cache_dir) / f"{_entry_key(digest, wanted)}.bc"
    result = _read_entry(entry, wanted) if entry is not None else None
    if result is None:
        result = _build(str(file), wanted)
        if entry is not None and not result.missing:
            _write_entry(entry, result.bitcode)
    _memory[key] = result
    return result


def clear_memory() -> None:
    """Forget the subsets kept in this process: the next ``subset`` reads the cache folder or rebuilds."""
    _memory.clear()


def _file_digest(path: str) -> str:
    """sha256 of the libdevice file (recomputed only when its size or mtime changes)."""
    try:
        stat = os.stat(path)
    except OSError as error:
        raise CompileError(f"libdevice at {path} could not be read: {error}") from error
    return _digest_of(path, stat.st_size, stat.st_mtime_ns)


@functools.cache
def _digest_of(path: str, size: int, mtime_ns: int) -> str:
    try:
        with open(path, "rb") as file:
            return sha256(file.read()).hexdigest()
    except OSError as error:
        raise CompileError(f"libdevice at {path} could not be read: {error}") from error


def _entry_key(digest: str, wanted: frozenset[str]) -> str:
    version = ".".join(map(str, binding().llvm_version_info))
    text = "\0".join((str(FORMAT), digest, version, TRIPLE, DATA_LAYOUT, *sorted(wanted)))
    return sha256(text.encode()).hexdigest()


def _build(path: str, wanted: frozenset[str]) -> Subset:
    """Parse libdevice and link the wanted functions (and their callees) into a stub module."""
    llvm = binding()
    try:
        with open(path, "rb") as file:
            library = llvm.parse_bitcode(file.read())
    except (OSError, RuntimeError) as error:
        raise CompileError(f"libdevice at {path} could not be read: {error}") from error
    for function in library.functions:
        if not function.is_declaration:
            function.linkage = "linkonce_odr"
    # libdevice says "nvptx64-nvidia-gpulibs" with an old layout; ours avoids linker warnings.
    library.triple = TRIPLE
    library.data_layout = DATA_LAYOUT
    ordered = sorted(wanted)
    # With opaque pointers the declared type does not matter: linking replaces each declaration
    # with libdevice's definition (or leaves it declared when libdevice has no such function).
    declarations = "".join(f'declare void @"{name}"()\n' for name in ordered)
    pointers = ", ".join(f'ptr @"{name}"' for name in ordered)
    stub = llvm.parse_assembly(
        f'target triple = "{TRIPLE}"\ntarget datalayout = "{DATA_LAYOUT}"\n{declarations}'
        f"@{_KEEP} = linkonce_odr global [{len(ordered)} x ptr] [{pointers}]\n"
    )
    stub.link_in(library)
    missing = frozenset(name for name in ordered if stub.get_function(name).is_declaration)
    return Subset(_contractable_multiplies(llvm, stub).as_bitcode(), missing, "built")


def _contractable_multiplies(llvm: Any, module: Any) -> Any:
    """``module`` with every ``fmul`` marked ``contract``: a kernel's add marked the same way may fuse with
    a function's last multiply (nvcc's --fmad=true). libdevice's own adds carry no flag, so nothing inside
    the library changes."""
    text = re.sub(r"= fmul ", "= fmul contract ", str(module))
    return llvm.parse_assembly(text)


def _read_entry(entry: Path, wanted: frozenset[str]) -> Subset | None:
    """The subset stored at ``entry``, or None (absent, or failing its seal: then it is removed and rebuilt).

    The seal (``cubepy.sealed``) proves this user's cubepy wrote the bytes, and only whole subsets are written,
    so nothing here parses them: LLVM first sees cached bitcode in the compile child, after the check.
    """
    folder = sealed_folder(entry.parent)
    payload = None if folder is None else folder.read(entry.name)
    return None if payload is None else Subset(payload, frozenset(), "disk")


def _write_entry(entry: Path, bitcode: bytes) -> None:
    """Seal and store ``bitcode`` at ``entry`` atomically; a folder that cannot be written only costs the reuse."""
    folder = sealed_folder(entry.parent)
    if folder is None:
        return
    try:
        folder.write(entry.name, bitcode)
    except OSError:
        pass


def parse(found: Subset) -> Any:
    """A fresh llvmlite module of ``found``'s bitcode, to link (linking consumes it)."""
    return binding().parse_bitcode(found.bitcode)
