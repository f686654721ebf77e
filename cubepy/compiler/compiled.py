"""``compile_definition``: IR -> passes -> LLVM -> O3 -> PTX -> cubin, and the ``CompiledKernel`` it returns.

Stages and their timing keys: ``passes`` (verify + IR passes), ``lower`` (IR -> LLVM text),
``llvm_check`` (parse + verify in-process), ``llvm_opt+emit`` (libdevice link, O3 and PTX emission in
the forked child, fork included), ``ptxas``.  ``CUBEPY_DUMP=ir,llvm,ptx`` (any subset, or ``all``)
writes each compiled kernel to ``$CUBEPY_DUMP_DIR`` (default ``./cubepy_dump``), the IR numbered per pass.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import attrs

from cubepy.compiler import ptxas as ptxas_tool
from cubepy.compiler.passes import run_passes
from cubepy.compiler.target import DEFAULT_ARCH, Target, check_module, optimize_and_emit, parse_target
from cubepy.errors import CompileError
from cubepy.ir import KernelDefinition, format_kernel, verify


@attrs.frozen
class CompiledKernel:
    """A kernel compiled for one GPU architecture: every intermediate form, the cubin and its resources.

    ``name`` is the PTX entry's name (what ``cuModuleGetFunction`` takes).  ``cubin`` and
    ``resources`` are None when ptxas is unavailable or was not asked for; ``ptxas_status`` is
    ``"assembled"`` or says why not.
    """

    name: str
    definition: KernelDefinition
    ir: str
    llvm: str
    llvm_opt: str
    ptx: str
    cubin: bytes | None
    resources: ptxas_tool.Resources | None
    target: str
    timings: dict[str, float]
    pass_dumps: tuple[tuple[str, str], ...] = ()
    ptxas_log: str | None = None
    ptxas_status: str | None = None

    def dump(self, directory: str | os.PathLike, kinds: tuple[str, ...] = ("ir", "llvm", "ptx")) -> list[Path]:
        """Write the chosen forms to ``directory`` (``00-input.ir``, ``NN-<pass>.ir``, ``.ll``, ``.opt.ll``, ``.ptx``, ``.cubin``)."""
        folder = Path(directory) / self.name
        folder.mkdir(parents=True, exist_ok=True)
        files: dict[str, str | bytes] = {}
        if "ir" in kinds:
            for number, (pass_name, text) in enumerate(self.pass_dumps):
                files[f"{number:02d}-{pass_name}.ir"] = text
        if "llvm" in kinds:
            files["llvm.ll"], files["llvm.opt.ll"] = self.llvm, self.llvm_opt
        if "ptx" in kinds:
            files["kernel.ptx"] = self.ptx
            if self.cubin is not None:
                files["kernel.cubin"] = self.cubin
        written = []
        for filename, content in files.items():
            path = folder / filename
            tmp = path.with_suffix(path.suffix + ".tmp")
            (tmp.write_bytes if isinstance(content, bytes) else tmp.write_text)(content)
            os.replace(tmp, path)  # atomic: a reader never sees half a file
            written.append(path)
        return written


def compile_definition(definition: KernelDefinition, target: str = DEFAULT_ARCH, *,
                       assemble: bool = True) -> CompiledKernel:
    """Compile a kernel's IR to PTX (and a cubin when ``assemble`` and ptxas is available)."""
    from cubepy.compiler.lower import lower_kernel  # llvmlite.ir is imported only when compiling

    arch = parse_target(target)
    timings: dict[str, float] = {}
    start = time.perf_counter()
    input_text = format_kernel(definition)
    verify(definition)
    definition, dumps = run_passes(definition)
    timings["passes"] = time.perf_counter() - start

    start = time.perf_counter()
    lowered = lower_kernel(definition, arch.sm)
    llvm_text = str(lowered.module)
    timings["lower"] = time.perf_counter() - start

    start = time.perf_counter()
    module = check_module(llvm_text, lowered.entry_name, lowered.libdevice)
    timings["llvm_check"] = time.perf_counter() - start

    start = time.perf_counter()
    emitted = optimize_and_emit(module, arch, lowered.entry_name, lowered.libdevice)
    timings["llvm_opt+emit"] = time.perf_counter() - start
    timings.update({f"child_{key}": value for key, value in emitted.timings.items()})

    cubin = resources = log = None
    if not assemble:
        status = "not assembled (assemble=False)"
    elif not ptxas_tool.available():
        status = ptxas_tool.unavailable_reason()
    else:
        status = "assembled"
        start = time.perf_counter()
        cubin, resources, log = ptxas_tool.assemble_with_log(emitted.ptx, arch.arch, lowered.entry_name)
        timings["ptxas"] = time.perf_counter() - start

    compiled = CompiledKernel(
        name=lowered.entry_name, definition=definition, ir=format_kernel(definition), llvm=llvm_text,
        llvm_opt=emitted.llvm_opt, ptx=emitted.ptx, cubin=cubin, resources=resources, target=arch.arch,
        timings=timings, pass_dumps=(("input", input_text), *dumps), ptxas_log=log, ptxas_status=status,
    )
    _dump_if_requested(compiled)
    return compiled


def _dump_if_requested(compiled: CompiledKernel) -> None:
    wanted = os.environ.get("CUBEPY_DUMP", "").strip()
    if not wanted:
        return
    kinds = tuple(k.strip() for k in wanted.split(",") if k.strip())
    if "all" in kinds:
        kinds = ("ir", "llvm", "ptx")
    unknown = set(kinds) - {"ir", "llvm", "ptx"}
    if unknown:
        raise CompileError(f"CUBEPY_DUMP: unknown kinds {sorted(unknown)}; use ir, llvm, ptx or all")
    compiled.dump(os.environ.get("CUBEPY_DUMP_DIR", "cubepy_dump"), kinds)


__all__ = ["CompiledKernel", "Target", "compile_definition"]
