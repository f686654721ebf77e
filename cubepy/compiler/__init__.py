"""The compiler: IR passes and the LLVM/PTX back end (llvmlite -> NVPTX -> ptxas).

``compile_definition(definition, target="sm_90a")`` returns a ``CompiledKernel``.  Modules:

| module | what it does |
|---|---|
| ``passes`` | IR -> IR passes (checked_io, fold_constants, contract, dead_code, merge_branches, plane_uniform, bounds) and ``run_passes`` |
| ``abi`` | the kernel ABI: entry parameters, the by-value metadata words (``pack_metadata``) |
| ``llvm_types`` | IR types -> LLVM types, constants, raw attributes |
| ``lower`` | the lowering driver (values, memories, blocks); ``lower_arith``, ``lower_memory``, ``lower_control``, ``lower_sync``, ``lower_tma`` (TMA, mbarrier), ``lower_cmma`` (wmma) lower one op family each |
| ``debuginfo`` | source lines -> ``.loc`` directives |
| ``emit_ptx`` | architectures, the module checks, libdevice linking, O3 + PTX emission |
| ``llvm_jobs`` | the LLVM work that can abort a process, as functions of text and bytes |
| ``llvm_server`` | the compile server that runs those jobs (LLVM-abort isolation), restarted after a crash |
| ``llvm_process`` | LLVM in this process (its lock, parsing), and the forked child a small process uses instead |
| ``toolkit`` | finding ptxas and libdevice |
| ``libdevice`` | cutting out (and caching on disk) the libdevice functions a kernel calls |
| ``ptxas`` | PTX -> cubin and the ``ptxas -v`` resource report |
| ``compiled`` | ``compile_definition`` (the passes, then ``shared_reciprocal`` on fast-f64 GPUs) and ``CompiledKernel`` |

Importing this package imports neither ``llvmlite.binding`` nor ``llvmlite.ir``.

Debugging the compiler: ``compile_definition(d, dump=("passes", "llvm", "ptx", "resources"))`` writes
the IR after every pass (``00-input.ir``, ``01-checked_io.ir``, ...), the LLVM IR before and after O3
and the PTX; diff consecutive files to find the stage that broke a kernel.  ``CompiledKernel.timings``
splits the time per stage.  ``target.optimize_and_emit(..., isolate=False)`` runs LLVM in-process
(for a debugger; an LLVM abort then ends the process).
"""

from cubepy.compiler.abi import pack_metadata, param_layout
from cubepy.compiler.compiled import CompiledKernel, compile_definition
from cubepy.compiler.passes import checked_io, dead_code, fold_constants, run_passes
from cubepy.compiler.ptxas import Resources

__all__ = [
    "CompiledKernel",
    "Resources",
    "checked_io",
    "compile_definition",
    "dead_code",
    "fold_constants",
    "pack_metadata",
    "param_layout",
    "run_passes",
]
