"""Kernel identity: the part of the cache key that says *which code* a kernel is.

``function_identity`` hashes the kernel's source and, recursively, the source of every cube
function, cube type and plain helper function it names through globals or closures, plus a stable
text of every plain value it names (closure values such as the element type of a kernel factory, and
module constants).  Two kernels made by one factory with different closure values get different
identities; editing a called cube function changes its callers' identities.  Values whose ``repr``
is not stable across processes (``<object at 0x...>``) get a per-process token, so they can never
collide in the on-disk cache.  The identity is computed once per kernel.
"""

from __future__ import annotations

import ast
import builtins
import enum
import inspect
import os
import types
from typing import Any

import numpy as np

from cubepy.errors import ExpandError
from cubepy.frontend import source
from cubepy.frontend.function import BoundCubeFunction, CubeFunction
from cubepy.hashing import sha256

_PROCESS_TOKEN = os.urandom(16).hex()  # not uuid: importing it costs a disk-cache hit ~1 ms
_PLAIN = (bool, int, float, complex, str, bytes, type(None), range, slice, enum.Enum)


def function_identity(function: CubeFunction) -> str:
    """``module.qualname:sha256`` of everything ``function`` depends on."""
    digest = sha256()
    _Hasher(digest).function(function.fn)
    return f"{function.qualname}:{digest.hexdigest()}"


def _referenced(node: ast.AST) -> list[tuple[str, ...]]:
    """Names (and ``name.attr`` pairs) read in ``node``, sorted.

    A walk by hand (``ast.walk``'s generators cost 3x as much, on the path of every disk-cache hit).
    """
    paths: set[tuple[str, ...]] = set()
    stack = [node]
    while stack:
        sub = stack.pop()
        kind = type(sub)
        if kind is ast.Name:
            if type(sub.ctx) is ast.Load:  # type: ignore[attr-defined]
                paths.add((sub.id,))  # type: ignore[attr-defined]
            continue
        if kind is ast.Attribute and type(sub.value) is ast.Name and type(sub.ctx) is ast.Load:  # type: ignore[attr-defined]
            paths.add((sub.value.id, sub.attr))  # type: ignore[attr-defined]
        for field in sub._fields:
            value = getattr(sub, field, None)
            if type(value) is list:
                stack.extend(item for item in value if isinstance(item, ast.AST))
            elif isinstance(value, ast.AST):
                stack.append(value)
    return sorted(paths)


class _Hasher:
    def __init__(self, digest: Any) -> None:
        self.digest = digest
        self.seen: set[int] = set()

    def update(self, *parts: object) -> None:
        for part in parts:
            self.digest.update(str(part).encode())
            self.digest.update(b"\0")

    def function(self, fn: types.FunctionType) -> None:
        """Hash a Python function's source, defaults and what it references."""
        if id(fn) in self.seen:
            self.update("seen", fn.__qualname__)
            return
        self.seen.add(id(fn))
        try:
            text, node = source.function_definition(fn)
        except ExpandError:
            self.update("nosource", fn.__module__, fn.__qualname__, _unstable(fn))
            return
        # The file and first line too: the IR, the PTX `.loc` lines and the interp's errors name source
        # lines, so a kernel moved by lines inserted above it must not reuse an entry naming the old ones.
        code = fn.__code__
        self.update("fn", fn.__module__, fn.__qualname__, code.co_filename, code.co_firstlineno, text)
        for default in fn.__defaults__ or ():
            self.value(default)
        # Annotations are evaluated where the function is defined (`Array[F]` with F from a factory).
        for name, annotation in sorted(getattr(fn, "__annotations__", {}).items()):
            self.update("annotation", name)
            self.value(annotation)
        if node is None:  # not placed by the file's parse (a lambda, code without a file): parse the text
            try:
                node = ast.parse(_dedent(text))
            except SyntaxError:
                return
        closure = dict(zip(fn.__code__.co_freevars, fn.__closure__ or ()))
        for path in _referenced(node):
            found, value = _resolve(path[0], fn, closure)
            if not found:
                continue
            if len(path) == 2 and isinstance(value, (types.ModuleType, type)):
                if isinstance(value, types.ModuleType) and _is_cubepy(value.__name__):
                    continue
                attribute = getattr(value, path[1], _MISSING)
                if attribute is _MISSING:
                    continue
                self.update(".".join(path))
                self.value(attribute)
            elif len(path) == 1:
                self.update(path[0])
                self.value(value)

    def klass(self, cls: type) -> None:
        """Hash a class: its source and its cube methods' references."""
        if id(cls) in self.seen:
            self.update("seen", cls.__qualname__)
            return
        self.seen.add(id(cls))
        self.update("class", cls.__module__, cls.__qualname__)
        try:
            self.update(inspect.getsource(cls))
        except (OSError, TypeError):
            self.update(_unstable(cls))
        for attribute in vars(cls).values():
            if isinstance(attribute, CubeFunction):
                self.function(attribute.fn)

    def value(self, value: object) -> None:
        """Hash one referenced value."""
        if isinstance(value, CubeFunction):
            self.function(value.fn)
        elif isinstance(value, BoundCubeFunction):
            self.function(value.function.fn)
            self.value(value.receiver)
        elif isinstance(value, types.ModuleType):
            self.update("module", value.__name__)
        elif isinstance(value, type):
            if _is_cubepy(value.__module__) or value.__module__ == "builtins":
                self.update("type", value.__module__, value.__qualname__)
            else:
                self.klass(value)
        elif isinstance(value, types.FunctionType):
            if _is_cubepy(value.__module__):
                self.update("cubepy", value.__qualname__)
            else:
                self.function(value)
        elif isinstance(value, (types.BuiltinFunctionType, types.MethodWrapperType)):
            self.update("builtin", getattr(value, "__qualname__", repr(value)))
        elif isinstance(value, np.ndarray):  # repr abbreviates large arrays: hash the contents
            self.update(
                "ndarray",
                value.dtype.str,
                value.shape,
                sha256(np.ascontiguousarray(value).tobytes()).hexdigest(),
            )
        elif isinstance(value, np.generic):
            self.update("numpy", value.dtype.str, repr(value.item()))
        elif isinstance(value, _PLAIN):
            self.update(type(value).__qualname__, repr(value))
        elif isinstance(value, (tuple, list, frozenset, set)):
            self.update(type(value).__name__, len(value))
            for item in sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value:
                self.value(item)
        elif isinstance(value, dict):
            self.update("dict", len(value))
            for key, item in sorted(value.items(), key=lambda kv: repr(kv[0])):
                self.value(key)
                self.value(item)
        else:
            text = repr(value)
            self.update(type(value).__module__, type(value).__qualname__, text)
            if " at 0x" in text or text.startswith("<"):
                self.update(_unstable(value))


_MISSING = object()


def _resolve(name: str, fn: types.FunctionType, closure: dict[str, Any]) -> tuple[bool, object]:
    cell = closure.get(name)
    if cell is not None:
        try:
            return True, cell.cell_contents
        except ValueError:
            return False, None
    if name in fn.__globals__:
        return True, fn.__globals__[name]
    if hasattr(builtins, name):
        return False, None
    return False, None


def _is_cubepy(module: str | None) -> bool:
    return module is not None and (module == "cubepy" or module.startswith("cubepy."))


def _unstable(value: object) -> str:
    """A token that never repeats across processes (values without a stable text)."""
    return f"unstable:{_PROCESS_TOKEN}:{id(value)}"


def _dedent(text: str) -> str:
    lines = text.splitlines(keepends=True)
    indent = len(lines[0]) - len(lines[0].lstrip()) if lines else 0
    return ("if True:\n" + text) if indent else text
