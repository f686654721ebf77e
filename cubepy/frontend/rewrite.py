"""The AST rewrite of ``@cube`` functions: only what Python cannot overload.

``if``/``elif``/``else``, ``for``, ``while``, ``break``, ``continue``, ``return``, ``and``/``or``/``not``,
conditional expressions, chained comparisons, assignments (plain, augmented, annotated, subscript,
attribute, tuple unpacking) become calls into ``cubepy.frontend.syntax`` (bound to ``_cph``).  The
helpers decide at expansion time whether each construct is comptime (plain Python) or runtime (IR).

The rewrite also computes (with ``cubepy.frontend.liveness``), per construct, the names it assigns
(``stores``) and the names that may be read after it (``live``: anything loaded later in the function
or anywhere in an enclosing loop).
At expansion those names become mutable locals before a runtime construct; names first bound inside
a runtime construct and read after it are errors unless every branch of an ``if``/``else`` binds them.

An ``if`` becomes (``N`` = the names assigned in it)::

    _cp_1 = _cph.if_(cond, has_else)
    if _cp_1.runtime: (N) = _cp_1.enter(_cp_muts, 'N', (N), live)
    with _cp_1.then_():
        if _cp_1.take_then: <body>; _cp_1.then_done((N))
    if _cp_1.runtime: (N) = _cp_1.reset()
    with _cp_1.else_():
        if _cp_1.take_else: <orelse>; _cp_1.else_done((N))
    (N) = _cp_1.finish((N))

and a loop ``with _cph.for_range(range, a, b) as _cp_2: ... for _cp_3 in _cp_2.items(): with
_cp_2.iteration(): <target = _cp_3; body> ... (N) = _cp_2.finish((N))``.
"""

from __future__ import annotations

import ast
import linecache
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar, cast, overload

from cubepy.errors import ExpandError
from cubepy.frontend.liveness import Liveness, stored_names

HELPERS = "_cph"
FRAME = "_cp_muts"
_N = TypeVar("_N", bound="ast.AST | list[ast.stmt]")  # what _located is given, and gives back

_UNSUPPORTED = {
    ast.Try: "`try` statements are",
    ast.With: "`with` statements are",
    ast.AsyncWith: "`async with` is",
    ast.AsyncFor: "`async for` is",
    ast.AsyncFunctionDef: "async functions are",
    ast.Await: "`await` is",
    ast.Yield: "`yield` (generators) is",
    ast.YieldFrom: "`yield from` is",
    ast.Global: "`global` is",
    ast.Nonlocal: "`nonlocal` is",
    ast.Delete: "`del` is",
    ast.ClassDef: "class definitions are",
    ast.Match: "`match` statements are",
    ast.Lambda: "lambda expressions are",
    ast.NamedExpr: "assignment expressions (`:=`) are",
}
if hasattr(ast, "TryStar"):
    _UNSUPPORTED[ast.TryStar] = "`try`/`except*` statements are"

_AUG_OPS = {
    ast.Add: "iadd",
    ast.Sub: "isub",
    ast.Mult: "imul",
    ast.Div: "itruediv",
    ast.FloorDiv: "ifloordiv",
    ast.Mod: "imod",
    ast.Pow: "ipow",
    ast.BitAnd: "iand",
    ast.BitOr: "ior",
    ast.BitXor: "ixor",
    ast.LShift: "ilshift",
    ast.RShift: "irshift",
    ast.MatMult: "imatmul",
}
_CMP_OPS = {
    ast.Lt: "lt",
    ast.LtE: "le",
    ast.Gt: "gt",
    ast.GtE: "ge",
    ast.Eq: "eq",
    ast.NotEq: "ne",
    ast.Is: "is",
    ast.IsNot: "is_not",
    ast.In: "in",
    ast.NotIn: "not_in",
}


def syntax_error(node: ast.AST, message: str, filename: str) -> ExpandError:
    """An ExpandError at ``node`` of the user's file."""
    lineno = getattr(node, "lineno", None)
    col = getattr(node, "col_offset", None)
    source_line = linecache.getline(filename, lineno) if lineno else None
    return ExpandError(message, filename, lineno, col, source_line or None)


# -- node construction -----------------------------------------------------------------------
def _name(name: str, store: bool = False) -> ast.Name:
    return ast.Name(id=name, ctx=ast.Store() if store else ast.Load())


def _helper(attr: str, *args: ast.expr) -> ast.Call:
    return ast.Call(func=ast.Attribute(value=_name(HELPERS), attr=attr, ctx=ast.Load()), args=list(args), keywords=[])


def _method(obj: str, attr: str, *args: ast.expr) -> ast.Call:
    return ast.Call(func=ast.Attribute(value=_name(obj), attr=attr, ctx=ast.Load()), args=list(args), keywords=[])


def _attr(obj: str, attr: str) -> ast.Attribute:
    return ast.Attribute(value=_name(obj), attr=attr, ctx=ast.Load())


def _tuple(names: Iterable[str], store: bool = False) -> ast.Tuple:
    return ast.Tuple(elts=[_name(n, store) for n in names], ctx=ast.Store() if store else ast.Load())


def _const(value: Any) -> ast.Constant:
    return ast.Constant(value=value)


def _lambda(body: ast.expr) -> ast.Lambda:
    return ast.Lambda(
        args=ast.arguments(
            posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]
        ),
        body=body,
    )


def _located(nodes: _N, ref: ast.AST) -> _N:
    """Give generated nodes (those without a location) the first line of ``ref``.

    Generated nodes end on their first line: Python 3.11 places a method call at the end of its
    attribute, so a multi-line span would move every helper call to the construct's last line.
    """
    lineno, col = getattr(ref, "lineno", 1), getattr(ref, "col_offset", 0)
    end_col = getattr(ref, "end_col_offset", None) if getattr(ref, "end_lineno", lineno) == lineno else None
    for root in nodes if isinstance(nodes, list) else [nodes]:
        node: Any  # a located node (expr or stmt): it has the four position attributes
        for node in ast.walk(root):
            if "lineno" in node._attributes and not hasattr(node, "lineno"):
                node.lineno, node.col_offset, node.end_lineno = lineno, col, lineno
                if isinstance(node, ast.Attribute):  # a helper call: report it at the construct's start
                    node.end_col_offset = col + len(node.attr)
                else:
                    node.end_col_offset = end_col if end_col is not None else col + 1
    return nodes


class _Expressions(ast.NodeTransformer):
    """Expression-level rewrites: and/or/not, conditional expressions, chained comparisons."""

    def __init__(self, rewriter: FunctionRewriter) -> None:
        self.rewriter = rewriter

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.expr:
        values: list[ast.expr] = [self.visit(v) for v in node.values]
        helper = "and_" if isinstance(node.op, ast.And) else "or_"
        result = values[0]
        for value in values[1:]:
            result = _helper(helper, result, _lambda(value))
        return _located(result, node)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.expr:
        self.generic_visit(node)  # rewrites the children in place
        if isinstance(node.op, ast.Not):
            return _located(_helper("not_", node.operand), node)
        return node

    def visit_IfExp(self, node: ast.IfExp) -> ast.expr:
        test, body, orelse = self.visit(node.test), self.visit(node.body), self.visit(node.orelse)
        return _located(_helper("ifexp", test, _lambda(body), _lambda(orelse)), node)

    def visit_Compare(self, node: ast.Compare) -> ast.expr:
        self.generic_visit(node)  # rewrites the children in place
        if len(node.ops) == 1:
            return node
        ops = tuple(_CMP_OPS[type(op)] for op in node.ops)
        operands = [node.left, *node.comparators]
        return _located(_helper("compare_chain", _const(ops), *(_lambda(o) for o in operands)), node)

    def visit_Call(self, node: ast.Call) -> ast.expr:
        self.generic_visit(node)  # rewrites the children in place
        if isinstance(node.func, ast.Name) and node.func.id == "print":
            # A device print (cp.debug_print), decided at expansion: `print` may name the user's own function.
            call = ast.Call(func=_attr(HELPERS, "kernel_print"), args=[node.func, *node.args], keywords=node.keywords)
            return _located(call, node)
        return node

    def generic_visit(self, node: ast.AST) -> ast.AST:
        self.rewriter.check_supported(node)
        return super().generic_visit(node)


class FunctionRewriter:
    """Rewrites one function definition (nested definitions get their own rewriter)."""

    def __init__(self, fndef: ast.FunctionDef, filename: str) -> None:
        self.fndef = fndef
        self.filename = filename
        self.counter = 0
        self.expressions = _Expressions(self)
        args = fndef.args
        self.params = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}
        for extra in (args.vararg, args.kwarg):
            if extra is not None:
                self.params.add(extra.arg)
        liveness = Liveness()
        liveness.block(fndef.body, set(), None)
        self.live = liveness.live
        self.mutable_names: set[str] = set()
        for node in self._constructs(fndef.body):
            self.mutable_names |= stored_names(node.body + node.orelse) | (
                stored_names(node.target) if isinstance(node, ast.For) else set()
            )

    def _constructs(self, body: list[ast.stmt]) -> Iterator[ast.If | ast.For | ast.While]:
        for stmt in body:
            if isinstance(stmt, (ast.If, ast.For, ast.While)):
                yield stmt
                yield from self._constructs(stmt.body)
                yield from self._constructs(stmt.orelse)

    # -- helpers ----------------------------------------------------------------------------
    def error(self, node: ast.AST, message: str) -> ExpandError:
        """An ExpandError at ``node``."""
        return syntax_error(node, message, self.filename)

    def check_supported(self, node: ast.AST) -> None:
        """Raise for syntax cube functions do not support."""
        what = _UNSUPPORTED.get(type(node))
        if what is not None:
            raise self.error(node, f"{what} not supported in cube functions")

    def fresh(self) -> str:
        """A new generated local name."""
        self.counter += 1
        return f"_cp_{self.counter}"

    @overload
    def expr(self, node: ast.expr) -> ast.expr: ...

    @overload
    def expr(self, node: None) -> None: ...

    def expr(self, node: ast.expr | None) -> ast.expr | None:
        """An expression with its and/or/not/ternaries/chains rewritten."""
        return None if node is None else self.expressions.visit(node)

    # -- the function -----------------------------------------------------------------------
    def rewrite(self) -> ast.FunctionDef:
        """The rewritten function definition."""
        fndef = self.fndef
        prologue: list[ast.stmt] = [ast.Assign(targets=[_name(FRAME, True)], value=_helper("frame"))]
        for name in sorted(self.mutable_names - self.params):
            prologue.append(ast.Assign(targets=[_name(name, True)], value=_helper("unbound", _const(name))))
        body = self.block(fndef.body)
        docstring: list[ast.stmt] = []
        first = body[0] if body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
            docstring, body = [first], body[1:]
        new_body = docstring + _located(prologue, fndef) + (body or [ast.Pass()])
        result = ast.FunctionDef(
            name=fndef.name, args=fndef.args, body=new_body, decorator_list=[], returns=None, type_comment=None
        )
        if hasattr(ast.FunctionDef, "type_params") or "type_params" in ast.FunctionDef._fields:  # Python 3.12+
            setattr(result, "type_params", [])
        return _located(ast.copy_location(result, fndef), fndef)

    def block(self, body: list[ast.stmt]) -> list[ast.stmt]:
        """A rewritten statement list."""
        out: list[ast.stmt] = []
        for stmt in body:
            out.extend(_located(self.statement(stmt), stmt))
        return out

    def statement(self, node: ast.stmt) -> list[ast.stmt]:
        """One rewritten statement (possibly several)."""
        self.check_supported(node)
        method = getattr(self, f"_stmt_{type(node).__name__}", None)
        if method is not None:
            return cast("list[ast.stmt]", method(node))
        if isinstance(node, (ast.Pass, ast.Import, ast.ImportFrom)):
            return [node]
        if isinstance(node, ast.Expr):
            return [ast.Expr(value=self.expr(node.value))]
        if isinstance(node, ast.Assert):
            return [ast.Assert(test=self.expr(node.test), msg=self.expr(node.msg))]
        if isinstance(node, ast.Raise):
            return [ast.Raise(exc=self.expr(node.exc), cause=self.expr(node.cause))]
        raise self.error(node, f"`{type(node).__name__}` statements are not supported in cube functions")

    # -- assignments ------------------------------------------------------------------------
    def _stmt_Assign(self, node: ast.Assign) -> list[ast.stmt]:
        value = self.expr(node.value)
        if len(node.targets) == 1:
            return self.assign_to(node.targets[0], value)
        temp = self.fresh()
        out: list[ast.stmt] = [ast.Assign(targets=[_name(temp, True)], value=value)]
        for target in node.targets:
            out.extend(self.assign_to(target, _name(temp)))
        return out

    def _stmt_AnnAssign(self, node: ast.AnnAssign) -> list[ast.stmt]:
        if node.value is None:
            return []
        return self.assign_to(node.target, _helper("annotate", self.expr(node.value), self.expr(node.annotation)))

    def _stmt_AugAssign(self, node: ast.AugAssign) -> list[ast.stmt]:
        op = _const(_AUG_OPS[type(node.op)])
        value = self.expr(node.value)
        target = node.target
        if isinstance(target, ast.Name):
            return self.assign_to(target, _helper("iop", op, _name(target.id), value))
        if isinstance(target, ast.Subscript):
            obj, index = self.expr(target.value), self._index(target.slice)
            if isinstance(target.value, ast.Name):
                call = _helper("aug_setitem", _name(FRAME), obj, index, op, value)
                return [ast.Assign(targets=[_name(target.value.id, True)], value=call)]
            return [ast.Expr(value=_helper("aug_setitem", _const(None), obj, index, op, value))]
        if isinstance(target, ast.Attribute):
            call = _helper("aug_setattr", _name(FRAME), self.expr(target.value), _const(target.attr), op, value)
            return [ast.Expr(value=call)]
        raise self.error(node, "unsupported augmented assignment target")

    def _index(self, index: ast.expr) -> ast.expr:
        if isinstance(index, ast.Slice):
            parts = [self.expr(p) if p is not None else _const(None) for p in (index.lower, index.upper, index.step)]
            return _located(ast.Call(func=_name("slice"), args=parts, keywords=[]), index)
        return self.expr(index)

    def assign_to(self, target: ast.expr, value: ast.expr) -> list[ast.stmt]:
        """Statements binding ``target`` to the (already rewritten) ``value``."""
        if isinstance(target, ast.Name):
            if target.id in self.mutable_names:
                call = _helper("assign", _name(FRAME), _name(target.id), value)
            else:
                call = _helper("let", _name(FRAME), value)
            return [ast.Assign(targets=[_name(target.id, True)], value=call)]
        if isinstance(target, (ast.Tuple, ast.List)):
            stars = [i for i, elt in enumerate(target.elts) if isinstance(elt, ast.Starred)]
            temp = self.fresh()
            star = _const(stars[0] if stars else None)
            out: list[ast.stmt] = [
                ast.Assign(
                    targets=[_name(temp, True)],
                    value=_helper("unpack", _name(FRAME), value, _const(len(target.elts)), star),
                )
            ]
            for i, elt in enumerate(target.elts):
                inner = elt.value if isinstance(elt, ast.Starred) else elt
                item = ast.Subscript(value=_name(temp), slice=_const(i), ctx=ast.Load())
                out.extend(_located(self.assign_to(inner, item), elt))
            return out
        if isinstance(target, ast.Subscript):
            obj, index = self.expr(target.value), self._index(target.slice)
            if isinstance(target.value, ast.Name):
                call = _helper("setitem", _name(FRAME), obj, index, value)
                return [ast.Assign(targets=[_name(target.value.id, True)], value=call)]
            return [ast.Expr(value=_helper("setitem", _const(None), obj, index, value))]
        if isinstance(target, ast.Attribute):
            call = _helper("setattr_", _name(FRAME), self.expr(target.value), _const(target.attr), value)
            return [ast.Expr(value=call)]
        raise self.error(target, f"cannot assign to {type(target).__name__}")

    # -- control flow -----------------------------------------------------------------------
    def _names_of(self, node: ast.If | ast.For | ast.While) -> tuple[tuple[str, ...], tuple[str, ...]]:
        names = stored_names(node.body + node.orelse)
        if isinstance(node, ast.For):
            names |= stored_names(node.target)
        names -= {FRAME}
        ordered = tuple(sorted(names))
        live = tuple(n for n in ordered if n in self.live.get(id(node), set()))
        return ordered, live

    def _enter(self, control: str, names: tuple[str, ...], live: tuple[str, ...]) -> list[ast.stmt]:
        if not names:
            return []
        call = _method(control, "enter", _name(FRAME), _const(names), _tuple(names), _const(live))
        return [
            ast.If(
                test=_attr(control, "runtime"), body=[ast.Assign(targets=[_tuple(names, True)], value=call)], orelse=[]
            )
        ]

    def _finish(self, control: str, names: tuple[str, ...]) -> ast.stmt:
        call = _method(control, "finish", _tuple(names))
        if not names:
            return ast.Expr(value=call)
        return ast.Assign(targets=[_tuple(names, True)], value=call)

    def _stmt_If(self, node: ast.If) -> list[ast.stmt]:
        names, live = self._names_of(node)
        control = self.fresh()
        has_else = bool(node.orelse)
        out: list[ast.stmt] = [
            ast.Assign(targets=[_name(control, True)], value=_helper("if_", self.expr(node.test), _const(has_else)))
        ]
        out.extend(self._enter(control, names, live))
        arms = [("then_", "take_then", "then_done", node.body)]
        if has_else:
            arms.append(("else_", "take_else", "else_done", node.orelse))
        for index, (context, take, done, body) in enumerate(arms):
            if index == 1 and names:
                reset = ast.Assign(targets=[_tuple(names, True)], value=_method(control, "reset"))
                out.append(ast.If(test=_attr(control, "runtime"), body=[reset], orelse=[]))
            inner = self.block(body)
            if names:
                inner.append(ast.Expr(value=_method(control, done, _tuple(names))))
            guarded = ast.If(test=_attr(control, take), body=inner or [ast.Pass()], orelse=[])
            out.append(
                ast.With(
                    items=[ast.withitem(context_expr=_method(control, context), optional_vars=None)], body=[guarded]
                )
            )
        out.append(self._finish(control, names))
        return out

    def _loop(self, node: ast.For | ast.While, control_call: ast.expr, target: ast.expr | None) -> list[ast.stmt]:
        if node.orelse:
            raise self.error(node, f"`{type(node).__name__.lower()} ... else` is not supported in cube functions")
        names, live = self._names_of(node)
        control, item = self.fresh(), self.fresh()
        body = self.assign_to(target, _name(item)) if target is not None else []
        body = _located(body, target) if target is not None else body
        body.extend(self.block(node.body))
        iteration = ast.With(
            items=[ast.withitem(context_expr=_method(control, "iteration"), optional_vars=None)],
            body=body or [ast.Pass()],
        )
        loop = ast.For(target=_name(item, True), iter=_method(control, "items"), body=[iteration], orelse=[])
        inner = [*self._enter(control, names, live), loop, self._finish(control, names)]
        return [
            ast.With(items=[ast.withitem(context_expr=control_call, optional_vars=_name(control, True))], body=inner)
        ]

    def _stmt_For(self, node: ast.For) -> list[ast.stmt]:
        it = node.iter
        if (
            isinstance(it, ast.Call)
            and isinstance(it.func, ast.Name)
            and it.func.id == "range"
            and not it.keywords
            and not any(isinstance(a, ast.Starred) for a in it.args)
        ):
            call = _helper("for_range", _name("range"), *(self.expr(a) for a in it.args))
        else:
            call = _helper("for_", self.expr(it))
        return self._loop(node, _located(call, it), node.target)

    def _stmt_While(self, node: ast.While) -> list[ast.stmt]:
        always = isinstance(node.test, ast.Constant) and node.test.value is True
        call = _helper("while_", _lambda(self.expr(node.test)), _const(always))
        return self._loop(node, _located(call, node.test), None)

    def _stmt_Break(self, node: ast.Break) -> list[ast.stmt]:
        return [ast.If(test=_helper("brk"), body=[ast.Break()], orelse=[])]

    def _stmt_Continue(self, node: ast.Continue) -> list[ast.stmt]:
        return [ast.If(test=_helper("cont"), body=[ast.Continue()], orelse=[])]

    def _stmt_Return(self, node: ast.Return) -> list[ast.stmt]:
        return [ast.Return(value=_helper("ret", self.expr(node.value) if node.value else _const(None)))]

    def _stmt_FunctionDef(self, node: ast.FunctionDef) -> list[ast.stmt]:
        nested = FunctionRewriter(node, self.filename).rewrite()
        nested.decorator_list = [self.expr(d) for d in node.decorator_list] + [_located(_attr(HELPERS, "nested"), node)]
        return [nested]
