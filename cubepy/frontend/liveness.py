"""Name analysis of a ``@cube`` function's AST: which names each construct binds and which stay live.

The rewrite (``cubepy.frontend.rewrite``) needs, per ``if``/``for``/``while``, the names the
construct assigns (``stored_names``: subscript and attribute targets count for their base name) and
the names that may be read after it (``Liveness``: a backward pass over the structured body, where a
loop's set also holds its loop-carried names).  Those two sets decide which locals become mutable
before a runtime construct and which must be bound on every path.  This module only reads the AST;
it builds no nodes and imports nothing of cubepy.
"""

from __future__ import annotations

import ast

_SCOPES = (
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.Lambda,
    ast.ClassDef,
    ast.ListComp,
    ast.SetComp,
    ast.DictComp,
    ast.GeneratorExp,
)


def _target_names(target: ast.AST, out: set[str]) -> None:
    if isinstance(target, ast.Name):
        out.add(target.id)
    elif isinstance(target, (ast.Tuple, ast.List)):
        for elt in target.elts:
            _target_names(elt, out)
    elif isinstance(target, ast.Starred):
        _target_names(target.value, out)
    elif isinstance(target, (ast.Subscript, ast.Attribute)):
        base = target.value
        while isinstance(base, (ast.Subscript, ast.Attribute)):
            base = base.value
        if isinstance(base, ast.Name):
            out.add(base.id)


def stored_names(nodes: list[ast.stmt] | ast.AST) -> set[str]:
    """Names a statement list rebinds (subscript/attribute targets count for their base name)."""
    out: set[str] = set()
    todo: list[ast.AST] = list(nodes) if isinstance(nodes, list) else [nodes]
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Assign,)):
            for target in node.targets:
                _target_names(target, out)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            if not (isinstance(node, ast.AnnAssign) and node.value is None):
                _target_names(node.target, out)
        elif isinstance(node, ast.For):
            _target_names(node.target, out)
        elif isinstance(node, ast.FunctionDef):
            out.add(node.name)
            continue
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                out.add((alias.asname or alias.name).split(".")[0])
        if isinstance(node, _SCOPES):
            continue
        todo.extend(ast.iter_child_nodes(node))
    return out


def loaded_names(node: ast.AST | list[ast.stmt]) -> set[str]:
    """Every name read anywhere in ``node`` (nested scopes included; augmented targets count)."""
    out: set[str] = set()
    for root in node if isinstance(node, list) else [node]:
        for sub in ast.walk(root):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load):
                out.add(sub.id)
            elif isinstance(sub, ast.AugAssign):
                _target_names(sub.target, out)
    return out


class Liveness:
    """Backward liveness over the structured body: which names may be read after each if/loop.

    For an ``if`` the set is what is live after it; for a loop it is what is live at the loop head
    (after it, or read by a later iteration before being reassigned: loop-carried names).
    """

    def __init__(self) -> None:
        self.live: dict[int, set[str]] = {}

    def block(self, body: list[ast.stmt], out: set[str], loop: tuple[set[str], set[str]] | None) -> set[str]:
        live = set(out)
        for stmt in reversed(body):
            live = self.statement(stmt, live, loop)
        return live

    def statement(self, node: ast.stmt, out: set[str], loop: tuple[set[str], set[str]] | None) -> set[str]:
        if isinstance(node, ast.If):
            self.live[id(node)] = set(out)
            return loaded_names(node.test) | self.block(node.body, out, loop) | self.block(node.orelse, out, loop)
        if isinstance(node, (ast.For, ast.While)):
            if isinstance(node, ast.For):
                entry, killed = loaded_names(node.iter), _killed(node.target)
            else:
                entry, killed = loaded_names(node.test), set()
            head = set(out) | entry
            while True:
                body_in = self.block(node.body, head, (head, out))
                new_head = set(out) | (body_in - killed) | (entry if isinstance(node, ast.While) else set())
                if new_head <= head:
                    break
                head |= new_head
            self.block(node.orelse, out, loop)
            self.live[id(node)] = head
            return head | entry
        if isinstance(node, ast.Break):
            return set(loop[1]) if loop else set(out)
        if isinstance(node, ast.Continue):
            return set(loop[0]) if loop else set(out)
        if isinstance(node, ast.Return):
            return loaded_names(node)
        if isinstance(node, ast.FunctionDef):
            return (out - {node.name}) | loaded_names(node)
        if isinstance(node, ast.Assign):
            killed = set().union(*(_killed(t) for t in node.targets))
            return (out - killed) | loaded_names(node)
        if isinstance(node, ast.AnnAssign) and node.value is not None:
            return (out - _killed(node.target)) | loaded_names(node)
        return out | loaded_names(node)


def _killed(target: ast.AST) -> set[str]:
    """Names a target rebinds unconditionally (plain names, also inside tuples)."""
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, (ast.Tuple, ast.List)):
        return set().union(*(_killed(e) for e in target.elts)) if target.elts else set()
    if isinstance(target, ast.Starred):
        return _killed(target.value)
    return set()
