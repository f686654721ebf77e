"""Where the CUDA toolkit's pieces live: ``ptxas`` and libdevice.

Search order: ``PATH`` (ptxas only), ``$CUDA_HOME``, ``$CUDA_PATH``, ``/usr/local/cuda``, the
directory above the ptxas found, and the ``nvidia-cuda-nvcc`` wheel (``nvidia/cuda_nvcc/`` in
site-packages).  Each lookup is cached for the process.
"""

from __future__ import annotations

import errno
import functools
import os
import shutil
import sys
from pathlib import Path

from cubepy.errors import CompileError

LIBDEVICE_RELATIVE = Path("nvvm") / "libdevice" / "libdevice.10.bc"


def _toolkit_roots() -> list[Path]:
    roots = [Path(os.environ[var]) for var in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(var)]
    roots.append(Path("/usr/local/cuda"))
    for entry in sys.path:
        wheel = Path(entry) / "nvidia" / "cuda_nvcc"
        if wheel.is_dir():
            roots.append(wheel)
    return roots


@functools.cache
def find_ptxas() -> str | None:
    """The path of ``ptxas``, or None when no CUDA toolkit is found."""
    on_path = shutil.which("ptxas")
    if on_path:
        return on_path
    for root in _toolkit_roots():
        candidate = root / "bin" / "ptxas"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


@functools.cache
def find_libdevice() -> Path | None:
    """The path of ``libdevice.10.bc``, or None when no CUDA toolkit provides it."""
    roots = _toolkit_roots()
    ptxas = find_ptxas()
    if ptxas is not None:
        real = Path(os.path.realpath(ptxas))
        roots.append(real.parent.parent)  # <toolkit>/bin/ptxas -> <toolkit>
    for root in roots:
        candidate = root / LIBDEVICE_RELATIVE
        if candidate.is_file():
            return candidate
    return None


# Errors that mean "no room to write", in words (EFBIG: a file size limit such as ``ulimit -f``).
NO_ROOM = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is used up",
    errno.EFBIG: "a file grew past the file size limit (ulimit -f)",
}


def write_error(error: OSError, folder: str | os.PathLike[str], what: str) -> CompileError:
    """A ``CompileError`` for a failed write of ``what`` in ``folder``: a full disk says so and names the folder."""
    reason = NO_ROOM.get(error.errno or 0)
    code = errno.errorcode.get(error.errno or 0, str(error.errno))
    if reason is not None:
        return CompileError(
            f"{what}: {reason} in {folder} ({code}: {error.strerror}); free space there, or point TMPDIR "
            f"(temporary files) or CUBEPY_CACHE_DIR (the kernel cache) at another folder"
        )
    return CompileError(f"{what}: cannot write in {folder} ({code}: {error.strerror or error})")
