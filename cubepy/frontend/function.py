"""Cube functions and methods (what ``@cube`` makes), and how their rewritten twins are compiled.

The source is read and rewritten on first expansion (``source.function_source``), compiled with the
user's file name and original line numbers, and run with the original function's globals and
closure cells (closures over plain values are comptime; over cube functions and types they work as
calls).  Methods get the CubeCL-style twin ``__expand_<name>(scope, this, *args)`` set on their class
(and under the class-mangled name ``_<Class>__expand_<name>`` too, since Python mangles
``__expand_x`` written inside a class body).
"""

from __future__ import annotations

import ast
import functools
import sys
import types
from collections.abc import Iterator
from typing import Any, NoReturn

from cubepy.errors import CubeError, NotAKernelError
from cubepy.frontend import source, syntax
from cubepy.frontend.mutability import check_bound
from cubepy.frontend.rewrite import HELPERS, FunctionRewriter, syntax_error
from cubepy.frontend.state import ScopeBuilder, active_state
from cubepy.ir import SourceLoc


def parse_function(fn: types.FunctionType) -> tuple[ast.FunctionDef, str]:
    """The function's definition node with the file's real line numbers and columns, and its file name."""
    lines, first_line = source.function_source(fn)
    text = "".join(lines)
    indent = len(lines[0]) - len(lines[0].lstrip())
    if indent:
        # Parse the indented source as the body of an `if` so that columns stay the file's columns.
        tree = ast.parse("if True:\n" + text)
        ast.increment_lineno(tree, first_line - 2)
        wrapper = tree.body[0]
        assert isinstance(wrapper, ast.If)
        node = wrapper.body[0]
    else:
        tree = ast.parse(text)
        ast.increment_lineno(tree, first_line - 1)
        node = tree.body[0]
    if isinstance(node, ast.AsyncFunctionDef):
        raise syntax_error(node, "async functions are not supported as cube functions", fn.__code__.co_filename)
    if not isinstance(node, ast.FunctionDef):
        raise CubeError(f"@cube expects a function definition ({fn.__qualname__!r} is a {type(node).__name__})")
    return node, fn.__code__.co_filename


def _enclosing_class(qualname: str) -> str | None:
    parts = qualname.split(".")
    if len(parts) >= 2 and parts[-2] != "<locals>":
        return parts[-2]
    return None


def _find_code(code: types.CodeType, name: str, parent: str) -> types.CodeType | None:
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            if const.co_name == name and code.co_name == parent:
                return const
            found = _find_code(const, name, parent)
            if found is not None:
                return found
    return None


def compile_rewritten(fn: types.FunctionType) -> tuple[types.FunctionType, ast.FunctionDef]:
    """The rewritten expand twin of ``fn`` and the original definition node."""
    node, filename = parse_function(fn)
    rewritten = FunctionRewriter(node, filename).rewrite()
    freevars = [name for name in fn.__code__.co_freevars if name != "__class__"]
    args = ast.arguments(
        posonlyargs=[],
        args=[ast.arg(arg=n) for n in (HELPERS, *freevars)],
        vararg=None,
        kwonlyargs=[],
        kw_defaults=[],
        kwarg=None,
        defaults=[],
    )
    body: list[ast.stmt] = [rewritten, ast.Return(ast.Name(fn.__name__, ast.Load()))]
    if fn.__name__ not in freevars:
        # The def binds the function's name in the factory; keep the body's own references to that
        # name global (as in the original), so recursion through the module-level cube function works.
        body.insert(0, ast.Global(names=[fn.__name__]))
    factory = ast.FunctionDef(
        name="_cp_factory", args=args, body=body, decorator_list=[], returns=None, type_comment=None
    )
    if "type_params" in ast.FunctionDef._fields:  # Python 3.12+
        setattr(factory, "type_params", [])
    top: ast.stmt = factory
    class_name = _enclosing_class(fn.__qualname__)
    if class_name is not None:
        # Inside a class body Python mangles `__name`; compile inside a same-named class to match.
        top = ast.ClassDef(name=class_name, bases=[], keywords=[], body=[factory], decorator_list=[])
        if "type_params" in ast.ClassDef._fields:  # Python 3.12+
            setattr(top, "type_params", [])
    ast.copy_location(top, node)
    ast.copy_location(factory, node)
    module = ast.fix_missing_locations(ast.Module(body=[top], type_ignores=[]))
    code = compile(module, filename, "exec", dont_inherit=True)
    fn_code = _find_code(code, fn.__name__, "_cp_factory")
    if fn_code is None:  # a mangled private name
        fn_code = next(c for c in _find_code_all(code) if c.co_name.endswith(fn.__name__))
    source.register_user_code(fn_code, fn.__qualname__)
    original = dict(zip(fn.__code__.co_freevars, fn.__closure__ or ()))
    cells = []
    for name in fn_code.co_freevars:
        if name == HELPERS:
            cells.append(types.CellType(syntax))
        else:
            cells.append(original.get(name, types.CellType()))
    twin = types.FunctionType(fn_code, fn.__globals__, fn.__name__, fn.__defaults__, tuple(cells))
    twin.__kwdefaults__ = fn.__kwdefaults__
    twin.__qualname__ = fn.__qualname__
    twin.__doc__ = fn.__doc__
    twin.__module__ = fn.__module__
    return twin, node


def _find_code_all(code: types.CodeType) -> Iterator[types.CodeType]:
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield const
            yield from _find_code_all(const)


class CubeFunction:
    """A ``@cube`` function: expanded inline wherever a kernel or cube function calls it."""

    def __init__(self, fn: Any) -> None:
        # `@cube` above `@staticmethod`: an associated function without receiver (CubeCL's `Foo::new`).
        self.static = isinstance(fn, staticmethod)
        if self.static:
            fn = fn.__func__
        if not isinstance(fn, types.FunctionType):
            raise CubeError(f"@cube expects a function, got {type(fn).__name__}")
        self.fn = fn
        self.owner: type | None = None
        self._twin: types.FunctionType | None = None
        self._node: ast.FunctionDef | None = None
        functools.update_wrapper(self, fn)

    @property
    def name(self) -> str:
        """The function's name."""
        return self.fn.__name__

    @property
    def qualname(self) -> str:
        """The function's qualified name (``module.Class.method``)."""
        return f"{self.fn.__module__}.{self.fn.__qualname__}"

    def expand_function(self) -> types.FunctionType:
        """The rewritten Python function that expands this cube function (compiled on first use)."""
        if self._twin is None:
            self._twin, self._node = compile_rewritten(self.fn)
        return self._twin

    def definition_node(self) -> ast.FunctionDef:
        """The original ``def`` node (with the file's line numbers)."""
        if self._node is None:
            self._node, _ = parse_function(self.fn)
        return self._node

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        state = active_state()
        if state is None:
            raise CubeError(
                f"cube function {self.fn.__qualname__!r} was called from plain Python; cube functions "
                "only run inside a kernel being expanded (launch a kernel, or use "
                "cubepy.testing.expand to inspect one)"
            )
        return self.invoke(state, args, kwargs)

    def invoke(self, state: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Expand the body with ``args`` in the current scope of ``state``."""
        for value in (*args, *kwargs.values()):
            check_bound(value)
        twin = self.expand_function()
        depth = getattr(state, "cube_call_depth", 0)
        if depth >= MAX_CALL_DEPTH:
            source.fail(
                f"cube function calls nest deeper than {MAX_CALL_DEPTH} (here {self.fn.__qualname__!r} is called at "
                f"depth {depth + 1}): a comptime recursion must reach its base case within {MAX_CALL_DEPTH} calls"
            )
        state.cube_call_depth = depth + 1
        try:
            with state.control_entry("function", self.fn.__qualname__):
                return twin(*args, **kwargs)
        except RecursionError as error:
            if depth:
                raise  # converted by the outermost call, where the stack has room again
            raise _recursion_error(error, self.fn.__qualname__) from None
        finally:
            state.cube_call_depth = depth

    def expand(self, scope: ScopeBuilder | None, *args: Any, **kwargs: Any) -> Any:
        """CubeCL's ``foo::expand(scope, args..)``: expand into ``scope``."""
        state = active_state()
        if state is None:
            raise CubeError(f"{self.fn.__qualname__}.expand needs an expansion in progress")
        if isinstance(scope, ScopeBuilder) and scope is not state.current:
            with state.in_scope(scope):
                return self.invoke(state, args, kwargs)
        return self.invoke(state, args, kwargs)

    def __get__(self, obj: Any, objtype: type | None = None) -> CubeFunction | BoundCubeFunction:
        if obj is None or self.static:
            return self
        return BoundCubeFunction(self, obj)

    def __set_name__(self, owner: type, name: str) -> None:
        self.owner = owner
        twin = staticmethod(self.expand)
        setattr(owner, f"__expand_{name}", twin)
        setattr(owner, f"_{owner.__name__.lstrip('_')}__expand_{name}", twin)

    def __getattr__(self, name: str) -> NoReturn:
        # Only reached for attributes a cube function lacks: say how to get a kernel's.
        if name in _KERNEL_ATTRIBUTES and type(self) is CubeFunction:
            raise NotAKernelError(
                f"{self.fn.__qualname__!r} is a cube function, not a kernel, so it has no "
                f".{name}: decorate it with @cube(launch=True) (or launch_unchecked=True for "
                f".launch_unchecked) to launch or compile it"
            )
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __repr__(self) -> str:
        return f"<cube function {self.fn.__qualname__}>"


_KERNEL_ATTRIBUTES = frozenset({"launch", "launch_unchecked", "compile"})
# Nested cube function calls one expansion allows: each costs about 5 Python frames, so this stays well
# inside Python's default recursion limit (1000) even when the launch itself starts deep in a program.
MAX_CALL_DEPTH = 100


def _recursion_error(error: RecursionError, name: str) -> CubeError:
    """An ``ExpandError`` for Python's recursion limit hit while expanding, at the deepest user line."""
    loc = None
    tb = error.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code in source._USER_CODES:
            code = tb.tb_frame.f_code
            loc = SourceLoc(code.co_filename, tb.tb_lineno, 0, source._USER_CODES[code][0])
        tb = tb.tb_next
    return source.located_error(
        f"expanding {name!r} went past Python's recursion limit ({sys.getrecursionlimit()} frames): comptime "
        f"recursion or nesting too deep to expand (cube function calls may nest {MAX_CALL_DEPTH} deep)",
        loc,
    )


class BoundCubeFunction:
    """A cube method bound to its receiver (``self`` is passed as the first argument)."""

    __slots__ = ("function", "receiver")

    def __init__(self, function: CubeFunction, receiver: Any) -> None:
        self.function = function
        self.receiver = receiver

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        state = active_state()
        if state is None:
            raise CubeError(
                f"cube method {self.function.fn.__qualname__!r} was called from plain Python; it only "
                "runs inside a kernel being expanded"
            )
        return self.function.invoke(state, (self.receiver, *args), kwargs)

    def __repr__(self) -> str:
        return f"<bound cube method {self.function.fn.__qualname__} of {self.receiver!r}>"
