"""The package's import graph: no new cycle closed by a function-level import, no back end reaching into
another's private names.

A function-level ``import`` that closes a cycle (module B imports A at module level, directly or through
others, and A imports B inside a function) hides a layering problem the module-level imports would show.
The pairs that remain are listed below with the reason each stays; a new one fails here.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "cubepy"

# (importer, imported) pairs whose function-level import still closes a cycle, and why.
KNOWN_CYCLES = {
    # The frontend's value model is one knot: operations wrap each result in an ExpandElement, whose dtype is a
    # ScalarType; Python finds x + y on ExpandBase and f32(x) on ScalarType, so those methods reach operations late.
    # Merged, values and operations would be ~760 lines; handing the proxies a builder at run time is a hook.
    ("cubepy.frontend.elem", "cubepy.frontend.operations"): "cp.f32(x) and Line[T](x) in a kernel emit a cast",
    ("cubepy.frontend.values", "cubepy.frontend.operations"): "a proxy's operators emit the IR operations",
}
BACK_ENDS = ("cubepy.runtime.interp", "cubepy.runtime.cpu", "cubepy.runtime.cuda", "cubepy.compiler")


def _modules() -> dict[str, Path]:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _imports(modules: dict[str, Path]) -> list[tuple[str, str, bool, list[str], int]]:
    """(importer, imported module, at module level, imported names, line) for each cubepy import."""
    found = []
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]

        def visit(node: ast.AST, top: bool, name: str = name, package: str = package) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                    visit(child, False)
                    continue
                if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                    continue  # annotations only: never runs
                if isinstance(child, ast.Import):
                    for alias in child.names:
                        found.append((name, alias.name, top, [], child.lineno))
                elif isinstance(child, ast.ImportFrom):
                    base = child.module or ""
                    if child.level:
                        parts = package.split(".")[: len(package.split(".")) - child.level + 1]
                        base = ".".join(parts + ([base] if base else []))
                    for alias in child.names:
                        target = f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                        found.append((name, target, top, [alias.name], child.lineno))
                visit(child, top)

        visit(ast.parse(path.read_text()), True)
    return [entry for entry in found if entry[1] in modules and entry[1] != entry[0]]


def test_no_new_cycle_is_closed_by_a_function_level_import():
    modules = _modules()
    imports = _imports(modules)
    graph: dict[str, set[str]] = {}
    for importer, imported, top, _, _ in imports:
        if top:
            graph.setdefault(importer, set()).add(imported)

    def reaches(start: str, goal: str) -> bool:
        seen, stack = {start}, [start]
        while stack:
            for nxt in graph.get(stack.pop(), ()):
                if nxt == goal:
                    return True
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
        return False

    closing = {
        (importer, imported): f"{modules[importer].relative_to(ROOT)}:{line}"
        for importer, imported, top, _, line in imports
        if not top and reaches(imported, importer)
    }
    new = {pair: where for pair, where in closing.items() if pair not in KNOWN_CYCLES}
    assert not new, f"function-level imports that close an import cycle (restructure, or list with a reason): {new}"
    gone = set(KNOWN_CYCLES) - set(closing)
    assert not gone, f"these cycles are gone: remove them from KNOWN_CYCLES: {sorted(gone)}"


def test_no_back_end_imports_another_back_ends_private_names():
    def back_end(module: str) -> str | None:
        return next((b for b in BACK_ENDS if module == b or module.startswith(b + ".")), None)

    offending = [
        f"{importer} imports {names} from {imported} (line {line})"
        for importer, imported, _, names, line in _imports(_modules())
        if back_end(importer) and back_end(imported) and back_end(importer) != back_end(imported)
        for names in [[n for n in names if n.startswith("_") and not n.startswith("__")]]
        if names
    ]
    assert not offending, offending
