"""``compile_definition``: IR -> passes -> LLVM -> O3 -> PTX -> cubin, and the ``CompiledKernel`` it returns.

Stages and their timing keys: ``passes`` (verify + IR passes), ``lower`` (IR -> LLVM text),
``llvm_check`` (parse + verify in-process), ``llvm_opt+emit`` (libdevice link, O3 and PTX emission in
the compile server, the round trip included; ``child_*`` split the server's own work), ``ptxas``.  ``dump=`` writes
the chosen stages of the kernel to files (``CompiledKernel.dump``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Collection
from pathlib import Path

import attrs

from cubepy.compiler import llvm_server
from cubepy.compiler import ptxas as ptxas_tool
from cubepy.compiler.emit_ptx import DEFAULT_ARCH, FAST_F64_ARCHS, check_module, optimize_and_emit, parse_target
from cubepy.compiler.passes import run_passes
from cubepy.errors import CompileError
from cubepy.ir import KernelDefinition, format_kernel, verify
from cubepy.ir.reciprocal import shared_reciprocal

DUMP_STAGES = ("ir", "passes", "llvm", "ptx", "resources")


# How ptxas words a note on code it could not make as fast as written: a "Potential Performance Loss"
# (C7508 setmaxnreg ignored, C7512/C7514 wgmma serialized), or a synchronization it added of its own
# (C7517 warpgroup.wait before a register a wgmma may still write, C7519 warpgroup.arrive after one).
PERFORMANCE_NOTES = ("Potential Performance Loss", " is injected ")


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
    # Bytes of dynamic shared memory the launch must provide (kernels over 48 KiB of shared memory).
    dynamic_shared_bytes: int = 0

    @property
    def performance_notes(self) -> tuple[str, ...]:
        """ptxas's notes on what it could not make as fast as written: a ``setmaxnreg`` it ignored, ``wgmma``s it
        serialized, a ``warpgroup.wait``/``arrive`` it injected.  The kernel runs, slower than written; empty
        when ptxas did not run or had nothing to say."""
        if not self.ptxas_log:
            return ()
        lines = self.ptxas_log.splitlines()
        return tuple(line.split(":", 1)[1].strip() for line in lines if any(n in line for n in PERFORMANCE_NOTES))

    def dump(self, directory: str | os.PathLike[str], stages: Collection[str] = DUMP_STAGES) -> list[Path]:
        """Write the chosen stages to ``directory/<name>/``; returns the files written.

        ``ir``: ``kernel.ir`` (the IR that was lowered); ``passes``: ``00-input.ir``, ``01-checked_io.ir``,
        ...; ``llvm``: ``llvm.<target>.ll`` and ``llvm.<target>.opt.ll``; ``ptx``: ``kernel.<target>.ptx`` (and
        ``kernel.<target>.cubin``); ``resources``: ``resources.<target>.txt`` (ptxas report and stage timings).
        The IR does not depend on the target; every later stage names it, so compiling one kernel for two
        targets keeps both.  Each file is written atomically, so a reader never sees half of one.
        """
        unknown = set(stages) - set(DUMP_STAGES)
        if unknown:
            raise CompileError(f"unknown dump stage(s) {sorted(unknown)}; known: {', '.join(DUMP_STAGES)}")
        files: dict[str, str | bytes] = {}
        if "ir" in stages:
            files["kernel.ir"] = self.ir
        if "passes" in stages:
            for number, (pass_name, text) in enumerate(self.pass_dumps):
                files[f"{number:02d}-{pass_name}.ir"] = text
        target = self.target
        if "llvm" in stages:
            files[f"llvm.{target}.ll"], files[f"llvm.{target}.opt.ll"] = self.llvm, self.llvm_opt
        if "ptx" in stages:
            files[f"kernel.{target}.ptx"] = self.ptx
            if self.cubin is not None:
                files[f"kernel.{target}.cubin"] = self.cubin
        if "resources" in stages:
            timings = "".join(f"{stage}: {seconds * 1e3:.2f} ms\n" for stage, seconds in self.timings.items())
            files[f"resources.{target}.txt"] = (
                f"target: {self.target}\nresources: {self.resources}\n"
                f"ptxas: {self.ptxas_status}\n{self.ptxas_log or ''}\n\n{timings}"
            )
        folder = Path(directory) / self.name
        folder.mkdir(parents=True, exist_ok=True)
        written = []
        for filename, content in files.items():
            path = folder / filename
            tmp = path.with_name(path.name + ".tmp")
            if isinstance(content, bytes):
                tmp.write_bytes(content)
            else:
                tmp.write_text(content)
            os.replace(tmp, path)
            written.append(path)
        return written


def compile_definition(
    definition: KernelDefinition,
    target: str = DEFAULT_ARCH,
    *,
    assemble: bool = True,
    dump: Collection[str] = (),
    dump_dir: str | os.PathLike[str] = "cubepy_dump",
    libdevice_cache: str | os.PathLike[str] | None = None,
) -> CompiledKernel:
    """Compile a kernel's IR to PTX (and a cubin when ``assemble`` and ptxas is available).

    ``dump`` names stages to write under ``dump_dir`` (see ``CompiledKernel.dump``); the caller maps
    ``CUBEPY_DUMP``/``CUBEPY_DUMP_DIR`` onto them (settings live outside the compiler's layer), and
    ``libdevice_cache`` (a folder that keeps the libdevice subsets kernels link, or None) onto ``CUBEPY_CACHE_DIR``.
    """
    from cubepy.compiler.lower import lower_kernel  # llvmlite.ir is imported only when compiling
    from cubepy.compiler.targets.nvptx import NvptxTarget

    arch = parse_target(target)
    llvm_server.warm()  # starting while this process runs the passes and lowers
    timings: dict[str, float] = {}
    start = time.perf_counter()
    input_text = format_kernel(definition)
    verify(definition)
    definition, dumps = run_passes(definition, dumps=True)
    if arch.arch in FAST_F64_ARCHS:
        shared = shared_reciprocal(definition)
        if shared is not definition:
            verify(shared)
            definition = shared
            dumps.append(("shared_reciprocal", format_kernel(definition)))
    timings["passes"] = time.perf_counter() - start

    start = time.perf_counter()
    lowered = lower_kernel(definition, NvptxTarget(arch.sm))
    llvm_text = str(lowered.module)
    timings["lower"] = time.perf_counter() - start

    start = time.perf_counter()
    module = check_module(llvm_text, lowered.entry_name, lowered.libdevice, libdevice_cache)
    timings["llvm_check"] = time.perf_counter() - start

    start = time.perf_counter()
    emitted = optimize_and_emit(module, arch, lowered.entry_name, lowered.libdevice, libdevice_cache=libdevice_cache)
    timings["llvm_opt+emit"] = time.perf_counter() - start
    timings.update({f"child_{key}": value for key, value in emitted.timings.items()})

    cubin = resources = log = None
    if not assemble:
        status = "not assembled (assemble=False)"
    elif not ptxas_tool.available():
        status = ptxas_tool.unavailable_reason() or "ptxas not available"
    else:
        status = "assembled"
        start = time.perf_counter()
        cubin, resources, log = ptxas_tool.assemble_with_log(emitted.ptx, arch.arch, lowered.entry_name)
        timings["ptxas"] = time.perf_counter() - start

    compiled = CompiledKernel(
        name=lowered.entry_name,
        definition=definition,
        ir=dumps[-1][1],
        llvm=llvm_text,
        llvm_opt=emitted.llvm_opt,
        ptx=emitted.ptx,
        cubin=cubin,
        resources=resources,
        target=arch.arch,
        timings=timings,
        pass_dumps=(("input", input_text), *dumps),
        ptxas_log=log,
        ptxas_status=status,
        dynamic_shared_bytes=lowered.dynamic_shared_bytes,
    )
    if dump:
        compiled.dump(dump_dir, tuple(dump))
    return compiled


__all__ = ["DUMP_STAGES", "CompiledKernel", "compile_definition"]
