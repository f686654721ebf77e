"""ptxas: PTX -> cubin, and the resource report of ``ptxas -v``; ``find_ptxas`` comes from ``toolkit``.

``assemble`` runs ``ptxas -arch=<arch> -v -lineinfo`` in a temporary directory.  When no ptxas is
found, ``available()`` is False and ``unavailable_reason()`` says why; callers then keep the PTX and
report no cubin instead of failing.
"""

from __future__ import annotations

import functools
import re
import subprocess
import tempfile
from pathlib import Path

import attrs

from cubepy.compiler.toolkit import find_ptxas, write_error

__all__ = [
    "Resources",
    "assemble",
    "assemble_with_log",
    "available",
    "find_ptxas",
    "parse_resources",
    "unavailable_reason",
    "version",
]
from cubepy.errors import CompileError

PTXAS_TIMEOUT_S = 300


@attrs.frozen
class Resources:
    """What one kernel uses per unit (registers, stack, spills) and per cube (shared memory, barriers)."""

    registers: int
    shared_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int
    stack_bytes: int
    barriers: int


@functools.cache
def version() -> str | None:
    """ptxas's release (``13.0.88``), or None when it is missing or silent."""
    ptxas = find_ptxas()
    if ptxas is None:
        return None
    try:
        out = subprocess.run([ptxas, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"V(\d+\.\d+\.\d+)", out)
    return match.group(1) if match else None


def available() -> bool:
    """Whether a ptxas executable was found."""
    return find_ptxas() is not None


def unavailable_reason() -> str | None:
    """Why no cubin can be produced, or None when ptxas is available."""
    if available():
        return None
    return (
        "ptxas not found: looked on PATH, under $CUDA_HOME/bin, $CUDA_PATH/bin, /usr/local/cuda/bin "
        "and in the nvidia-cuda-nvcc wheel"
    )


def _number(pattern: str, text: str) -> int:
    match = re.search(pattern, text)
    return int(match.group(1)) if match else 0


def parse_resources(log: str, kernel_name: str) -> Resources:
    """Read one entry's block of ``ptxas -v`` output (from "Compiling entry function 'name'" on)."""
    start = log.find(f"Compiling entry function '{kernel_name}'")
    if start < 0:
        raise CompileError(f"ptxas -v reported nothing for kernel {kernel_name!r}:\n{log}")
    following = log.find("Compiling entry function", start + 1)
    block = log[start : following if following >= 0 else len(log)]
    return Resources(
        registers=_number(r"Used (\d+) registers", block),
        shared_bytes=_number(r"(\d+) bytes smem", block),
        spill_store_bytes=_number(r"(\d+) bytes spill stores", block),
        spill_load_bytes=_number(r"(\d+) bytes spill loads", block),
        stack_bytes=_number(r"(\d+) bytes stack frame", block),
        barriers=_number(r"used (\d+) barriers", block),
    )


def entry_names(ptx: str) -> list[str]:
    """The ``.entry`` names a PTX module defines, in order."""
    return re.findall(r"\.entry\s+([A-Za-z_$][\w$]*)", ptx)


def assemble(
    ptx: str, arch: str, kernel_name: str | None = None, *, extra_args: tuple[str, ...] = ()
) -> tuple[bytes, Resources]:
    """Assemble PTX into a cubin for ``arch``; returns (cubin, resources of ``kernel_name``).

    ``kernel_name`` defaults to the module's first ``.entry``.  A failure raises ``CompileError`` with
    the ptxas log and the kernel's name.
    """
    cubin, resources, _ = assemble_with_log(ptx, arch, kernel_name, extra_args=extra_args)
    return cubin, resources


def assemble_with_log(
    ptx: str, arch: str, kernel_name: str | None = None, *, extra_args: tuple[str, ...] = ()
) -> tuple[bytes, Resources, str]:
    """``assemble``, also returning the ptxas ``-v`` log."""
    ptxas = find_ptxas()
    if ptxas is None:
        raise CompileError(unavailable_reason())
    if kernel_name is None:
        names = entry_names(ptx)
        if not names:
            raise CompileError("ptxas: the PTX defines no .entry")
        kernel_name = names[0]
    folder = tempfile.gettempdir()
    try:
        return _run_ptxas(ptxas, ptx, arch, kernel_name, extra_args)
    except OSError as error:  # the temporary folder: full disk, quota, no permission
        raise write_error(error, folder, f"ptxas on kernel {kernel_name}: writing its temporary files") from error


def _run_ptxas(
    ptxas: str, ptx: str, arch: str, kernel_name: str, extra_args: tuple[str, ...]
) -> tuple[bytes, Resources, str]:
    with tempfile.TemporaryDirectory(prefix="cubepy-ptxas-") as tmp:
        source, cubin = Path(tmp) / "kernel.ptx", Path(tmp) / "kernel.cubin"
        source.write_text(ptx)
        command = [ptxas, f"-arch={arch}", "-v", "-lineinfo", *extra_args, str(source), "-o", str(cubin)]
        try:
            proc = subprocess.run(command, capture_output=True, text=True, timeout=PTXAS_TIMEOUT_S)
        except subprocess.TimeoutExpired as error:
            raise CompileError(f"ptxas timed out after {PTXAS_TIMEOUT_S} s on kernel {kernel_name}") from error
        except OSError as error:  # not a write: ptxas itself could not be started
            raise CompileError(f"ptxas ({ptxas}) could not be run on kernel {kernel_name}: {error}") from error
        log = (proc.stdout + proc.stderr).strip()
        if proc.returncode != 0 or not cubin.is_file():
            raise CompileError(f"ptxas failed on kernel {kernel_name} for {arch} (exit {proc.returncode}):\n{log}")
        return cubin.read_bytes(), parse_resources(log, kernel_name), log
