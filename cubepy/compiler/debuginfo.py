"""Source-line debug info: the metadata that makes NVPTX print ``.file``/``.loc`` for the user's lines.

Only line tables are emitted (``emissionKind: DebugDirectivesOnly``): PTX gets ``.loc`` directives and
``ptxas -lineinfo`` carries them into the cubin, with no DWARF sections.  Instructions from a file other
than the kernel's (a helper cube function) use a ``DILexicalBlockFile`` naming that file.
"""

from __future__ import annotations

import os

import llvmlite.ir as ir

from cubepy.ir import KernelDefinition, SourceLoc, walk

_I32 = ir.IntType(32)


def first_location(definition: KernelDefinition) -> SourceLoc | None:
    """The first source location in the kernel's body, or None when no instruction has one."""
    for inst in walk(definition.body):
        if inst.loc is not None:
            return inst.loc
    return None


class DebugInfo:
    """Compile unit, subprogram and cached ``DILocation`` nodes for one kernel function."""

    def __init__(
        self, module: ir.Module, function: ir.Function, definition: KernelDefinition, first: SourceLoc
    ) -> None:
        self.module = module
        main_file = definition.source_file or first.file
        self._files: dict[str, ir.DIValue] = {}
        self._scopes: dict[str, ir.DIValue] = {}
        self._locations: dict[tuple[str, int, int], ir.DIValue] = {}
        self.main_file = main_file
        file_node = self._file(main_file)
        unit = module.add_debug_info(
            "DICompileUnit",
            {
                "language": ir.DIToken("DW_LANG_Python"),
                "file": file_node,
                "producer": "cubepy",
                "isOptimized": True,
                "runtimeVersion": 0,
                "emissionKind": ir.DIToken("DebugDirectivesOnly"),
            },
            is_distinct=True,
        )
        signature = module.add_debug_info("DISubroutineType", {"types": module.add_metadata([])})
        line = first.line if first.file == main_file else 0
        self.subprogram = module.add_debug_info(
            "DISubprogram",
            {
                "name": definition.name,
                "file": file_node,
                "line": line,
                "scopeLine": line,
                "type": signature,
                "unit": unit,
                "spFlags": ir.DIToken("DISPFlagDefinition | DISPFlagOptimized"),
            },
            is_distinct=True,
        )
        function.set_metadata("dbg", self.subprogram)
        module.add_named_metadata("llvm.dbg.cu", unit)
        module.add_named_metadata(
            "llvm.module.flags",
            module.add_metadata(
                [ir.Constant(_I32, 2), ir.MetaDataString(module, "Debug Info Version"), ir.Constant(_I32, 3)]
            ),
        )
        self._scopes[main_file] = self.subprogram
        self.current = self.location(first)

    def _file(self, path: str) -> ir.DIValue:
        node = self._files.get(path)
        if node is None:
            absolute = os.path.abspath(path) if not path.startswith("<") else path
            node = self.module.add_debug_info(
                "DIFile", {"filename": os.path.basename(absolute), "directory": os.path.dirname(absolute)}
            )
            self._files[path] = node
        return node

    def _scope(self, path: str) -> ir.DIValue:
        scope = self._scopes.get(path)
        if scope is None:
            scope = self.module.add_debug_info(
                "DILexicalBlockFile", {"scope": self.subprogram, "file": self._file(path), "discriminator": 0}
            )
            self._scopes[path] = scope
        return scope

    def location(self, loc: SourceLoc | None) -> ir.DIValue:
        """The ``DILocation`` of ``loc``; an instruction without one keeps the previous location.

        Every instruction needs some location: LLVM's verifier rejects a call to an inlinable
        function (libdevice) without ``!dbg`` inside a function that has debug info.
        """
        if loc is None:
            return self.current
        key = (loc.file, loc.line, loc.col)
        node = self._locations.get(key)
        if node is None:
            node = self.module.add_debug_info(
                "DILocation", {"line": loc.line, "column": loc.col + 1, "scope": self._scope(loc.file)}
            )
            self._locations[key] = node
        self.current = node
        return node
