"""Where user code is: the registry of rewritten code objects, source locations and located errors.

Every code object the ``@cube`` rewrite compiles is registered here, so that at expansion time the
innermost frame running user code can be found by walking the Python stack.  That frame's line is
the source location of every instruction emitted under it and of every ``ExpandError`` raised by
the frontend, so messages always point at the user's file and line.
"""

from __future__ import annotations

import ast
import inspect
import linecache
import os
import re
import sys
import types
from collections.abc import Iterator
from typing import Any, NoReturn, cast

from cubepy.errors import ExpandError
from cubepy.ir import SourceLoc

# code object -> (qualified function name, cached co_positions list or None)
_USER_CODES: dict[types.CodeType, list[Any]] = {}
_FRONTEND_DIR = os.path.dirname(os.path.abspath(__file__))
_CUBEPY_DIR = os.path.dirname(_FRONTEND_DIR)
_STDLIB_DIR = os.path.dirname(os.path.abspath(os.__file__))


def register_user_code(code: types.CodeType, qualname: str) -> None:
    """Mark ``code`` and every code object nested in it as user kernel code."""
    _USER_CODES[code] = [qualname, None]
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            register_user_code(const, qualname)


def function_source(fn: types.FunctionType) -> tuple[list[str], int]:
    """The source lines of ``fn`` and the number of the first, wherever Python kept them.

    A file, or ``linecache`` (IPython and Jupyter keep every cell there; ``exec`` of text registered there
    under the name given to ``compile``), or the command line of ``python -c``.  Otherwise an
    ``ExpandError`` saying how to give cubepy the source.  The lines are cut by the file's ``ast`` parse where
    it places the function (see ``function_text``), else by ``inspect.getsourcelines``.
    """
    placed = _placed(fn)
    if placed is not None:
        return placed[0], placed[1]
    code = getattr(inspect.unwrap(fn), "__code__", None)
    if code is None:
        raise ExpandError(f"cannot read the source of {fn!r}: it is not a Python function")
    # inspect falls back on the loader of the function's module, which under ``exec`` in ``__main__`` is the
    # runner's file, not the text the code came from: ask it only when the code's own file has lines.
    if own_lines(code, getattr(fn, "__globals__", None)):
        try:
            return inspect.getsourcelines(fn)
        except (OSError, TypeError):
            pass
    if _register_command_line_source(code):
        try:
            return inspect.getsourcelines(fn)
        except (OSError, TypeError):
            pass
    raise ExpandError(
        f"cannot read the source of {fn.__qualname__!r}: @cube rewrites a function from its source text, and "
        f"Python kept none for {code.co_filename} (code run through exec() or typed at a plain interactive "
        "prompt). Define the kernel in a .py file and import it, or in IPython/Jupyter (they keep each cell's "
        "source), or register the text before running it: `linecache.cache[name] = (len(text), None, "
        "text.splitlines(True), name)`, then `exec(compile(text, name, 'exec'))` with a unique name such as "
        "'<kernels-1>'",
        code.co_filename,
        code.co_firstlineno,
    )


def function_text(fn: types.FunctionType) -> str:
    """The source text of ``fn`` (decorators to its last statement), for hashing: ``function_source`` without tokenize.

    ``inspect.getsourcelines`` tokenizes the file (its first use in a process compiles tokenize's regular
    expressions, tens of ms, which a disk-cache hit would pay for the kernel's identity alone); this parses the
    file with ``ast`` (C, cached per file text) and cuts the function's lines.  Anything it cannot place
    (lambdas, code without a file) falls back to ``function_source``.
    """
    return function_definition(fn)[0]


def function_definition(fn: types.FunctionType) -> tuple[str, ast.AST | None]:
    """``function_text(fn)`` and, when the file's parse placed it, the ``def`` node it was cut by (else None)."""
    placed = _placed(fn)
    if placed is not None:
        return "".join(placed[0]), placed[2]
    return "".join(function_source(fn)[0]), None


def _placed(fn: types.FunctionType) -> tuple[list[str], int, ast.AST] | None:
    """``fn``'s lines (first decorator to last statement), the first one's number and its ``def`` node, cut by
    the file's ``ast`` parse; None where that cannot place it (lambdas, code without a file)."""
    fn = inspect.unwrap(fn)  # as inspect.getsourcelines does (a functools.wraps wrapper's source is not fn's)
    code = getattr(fn, "__code__", None)
    if code is None or code.co_name == "<lambda>":
        return None
    lines = own_lines(code, getattr(fn, "__globals__", None))
    node = _definition_at(code.co_filename, lines, code.co_name, code.co_firstlineno) if lines else None
    if node is None or node.end_lineno is None:
        return None
    return lines[code.co_firstlineno - 1 : node.end_lineno], code.co_firstlineno, node


def own_lines(code: types.CodeType, module_globals: dict[str, Any] | None) -> list[str]:
    """The lines of ``code``'s own file (a file, or text registered in ``linecache``), else ``[]``.

    ``linecache`` given a module's globals asks that module's loader for its source, whatever the file name:
    code compiled by ``exec`` under a name of its own in ``__main__``'s namespace would get the running
    script's lines.  So the globals are passed only when they belong to the module of that very file.
    """
    filename = code.co_filename
    if module_globals is not None and not _module_of_file(module_globals, filename):
        module_globals = None
    return linecache.getlines(filename, module_globals)


def _module_of_file(module_globals: dict[str, Any], filename: str) -> bool:
    spec = module_globals.get("__spec__")
    for path in (module_globals.get("__file__"), getattr(spec, "origin", None)):
        if isinstance(path, str) and os.path.abspath(path) == os.path.abspath(filename):
            return True
    return False


# file name -> (the linecache lines it was parsed from, {(name, first line): definition node})
_DEFINITIONS: dict[str, tuple[list[str], dict[tuple[str, int], ast.stmt]]] = {}


def _definition_at(filename: str, lines: list[str], name: str, first_line: int) -> ast.stmt | None:
    """The ``def`` of ``name`` whose first line (its first decorator's) is ``first_line``, or None."""
    cached = _DEFINITIONS.get(filename)
    if cached is None or cached[0] is not lines:
        try:
            tree = ast.parse("".join(lines))
        except (SyntaxError, ValueError):
            return None
        found: dict[tuple[str, int], ast.stmt] = {}
        for node in _statements(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([node.lineno] + [d.lineno for d in node.decorator_list])
                found[(node.name, start)] = node
        cached = _DEFINITIONS[filename] = (lines, found)
    return cached[1].get((name, first_line))


def _statements(node: ast.AST) -> Iterator[ast.AST]:
    """Every statement under ``node``, nested bodies included (a ``def`` is a statement; expressions are not
    entered, which makes this several times cheaper than ``ast.walk`` on a file)."""
    for field in ("body", "orelse", "finalbody", "handlers", "cases"):
        for child in getattr(node, field, ()):
            yield child
            yield from _statements(child)


def _register_command_line_source(code: types.CodeType) -> bool:
    """Put the text of ``python -c TEXT`` in ``linecache`` (Python 3.13 does the same) when ``code`` is from it."""
    argv = getattr(sys, "orig_argv", [])
    if code.co_filename != "<string>" or "-c" not in argv[:-1] or "<string>" in linecache.cache:
        return False
    text = argv[argv.index("-c") + 1]
    lines = text.splitlines(True)
    first = code.co_firstlineno
    # Only when the line the code object starts at is its def (or a decorator of it): exec() of other text
    # under the same default name must not be matched against the command line.
    block = "".join(lines[first - 1 : first + 20]) if 0 < first <= len(lines) else ""
    if not re.match(rf"\s*(@[^\n]*\n\s*)*(async\s+)?def\s+{re.escape(code.co_name)}\b", block):
        return False
    linecache.cache["<string>"] = (len(text), None, lines, "<string>")
    return True


def user_frame() -> types.FrameType | None:
    """The innermost frame that runs rewritten user code, or None."""
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code not in _USER_CODES:
        frame = frame.f_back
    return frame


def _column(frame: types.FrameType) -> int | None:
    entry = _USER_CODES.get(frame.f_code)
    if entry is None or not hasattr(frame.f_code, "co_positions"):
        return None
    if entry[1] is None:
        entry[1] = list(frame.f_code.co_positions())
    index = frame.f_lasti // 2
    positions = entry[1]
    if 0 <= index < len(positions):
        return cast("int | None", positions[index][2])
    return None


def current_loc(default: SourceLoc | None = None) -> SourceLoc | None:
    """The source location of the user code running now (``default`` when none is on the stack)."""
    frame = user_frame()
    if frame is None:
        return default
    col = _column(frame)
    return SourceLoc(frame.f_code.co_filename, frame.f_lineno, col or 0, _USER_CODES[frame.f_code][0])


def located_error(message: str, loc: SourceLoc | None = None) -> ExpandError:
    """An ``ExpandError`` at ``loc`` (default: the user line running now), with its source line."""
    if loc is None:
        loc = current_loc()
    if loc is None:
        return ExpandError(message)
    source_line = linecache.getline(loc.file, loc.line) or None
    return ExpandError(message, loc.file, loc.line, loc.col, source_line)


def fail(message: str, loc: SourceLoc | None = None) -> NoReturn:
    """Raise an ``ExpandError`` at ``loc`` (default: the user line running now)."""
    raise located_error(message, loc)


def _is_internal(frame: types.FrameType) -> bool:
    """Frames of cubepy itself and of the standard library (ast, contextlib) that it runs through."""
    if frame.f_code in _USER_CODES:
        return False
    filename = os.path.abspath(frame.f_code.co_filename)
    return filename.startswith((_CUBEPY_DIR + os.sep, _STDLIB_DIR + os.sep))


def user_traceback(tb: types.TracebackType | None) -> types.TracebackType | None:
    """``tb`` without cubepy-internal frames, so users see only their own code."""
    kept: list[types.TracebackType] = []
    while tb is not None:
        if not _is_internal(tb.tb_frame):
            kept.append(tb)
        tb = tb.tb_next
    result = None
    for entry in reversed(kept):
        result = types.TracebackType(result, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return result
