"""A kernel prepared for the interp: handlers resolved, literals converted, lifetimes of locals computed.

``prepare(kernel)`` builds a ``Program`` once per kernel (cached); the executor runs its ``Step``s.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator
from typing import cast

import numpy as np

from cubepy.errors import InterpreterError
from cubepy.forks import fork_safe
from cubepy.ir import Instruction, KernelDefinition, Scope, VarKind, child_scopes
from cubepy.ir.ops import branch
from cubepy.runtime.interp.memory import const_table_items, shared_layout
from cubepy.runtime.interp.registry import INTERP, Handler
from cubepy.runtime.interp.sanitizer import foreign_shared_operands
from cubepy.runtime.interp.values import literal

PROGRAM_CACHE_SIZE = 64


def source_prefix(inst: Instruction) -> str:
    """``file:line: `` of an instruction, or nothing when it has no location."""
    return f"{inst.loc.file}:{inst.loc.line}: " if inst.loc is not None else ""


class Step:
    """One instruction ready to run: its handler, the locals that die after it, whether lanes may leave."""

    __slots__ = ("inst", "handler", "dead", "may_exit", "foreign_shared", "control")

    def __init__(self, inst: Instruction, handler: Handler, dead: tuple[int, ...], may_exit: bool) -> None:
        self.inst = inst
        self.handler = handler
        self.dead = dead  # ValueStore keys of immutable locals whose last use is this step
        self.may_exit = may_exit  # a break/continue/return here (or nested) can shrink the scope's mask
        # Shared memories this op writes without telling the sanitizer (TMA, cmma): see sanitizer.py.
        self.foreign_shared = foreign_shared_operands(inst.operation)
        # The executor looks at the frame stack and pending blocks only after these steps.
        self.control = may_exit or getattr(handler, "interp_control", False)


class Program:
    """A kernel prepared for execution: handlers resolved, literals converted, lifetimes computed."""

    def __init__(self, kernel: KernelDefinition) -> None:
        self.kernel = kernel
        self.scopes: dict[int, tuple[Step, ...]] = {}
        self.literals: dict[int, np.ndarray | np.generic] = {}
        self._uses: dict[int, frozenset[int]] = {}
        self._escapes: dict[int, bool] = {}  # scope may shrink its parent's mask (break/continue/return)
        self._returns: dict[int, bool] = {}  # scope holds a return (it escapes loops too)
        # The prepared bodies (by id) of ``loop``s whose units may spin on memory: see ``_spins``.
        self.spin_loops: set[int] = set()
        self.body = self._compile(kernel.body)
        self.shared_offsets, self.shared_bytes = shared_layout(kernel.shared_memories)
        self.const_tables = {table.var.id: const_table_items(table) for table in kernel.const_tables}

    def steps(self, scope: Scope) -> tuple[Step, ...]:
        """The prepared steps of ``scope`` (the kernel body or any nested scope)."""
        return self.scopes[id(scope)]

    def may_leave(self, scope: Scope) -> bool:
        """Whether a break, continue or return inside ``scope`` can take lanes out of it."""
        return self._escapes[id(scope)]

    def _compile(self, scope: Scope) -> tuple[Step, ...]:
        key = id(scope)
        if key in self.scopes:
            return self.scopes[key]
        infos: list[tuple[Instruction, Handler, bool]] = []
        last_use: dict[int, int] = {}
        defined: set[int] = set()
        scope_uses: set[int] = set()
        returns = False
        for position, inst in enumerate(scope.instructions):
            operation = inst.operation
            handler = cast("Handler | None", INTERP.get(type(operation)))  # the table holds interp handlers
            if handler is None:
                raise InterpreterError(
                    f"{source_prefix(inst)}{INTERP.missing_message(type(operation))}\n  in instruction: {inst}"
                )
            children = child_scopes(operation)
            for child in children:
                self._compile(child)
            used: set[int] = set()
            for var in operation.operands():
                if var.kind is VarKind.CONST:
                    used.add(var.id)
                elif var.kind is VarKind.CONSTANT:
                    self.literals[id(var)] = literal(var.value, var.type)
            for child in children:
                used |= self._uses[id(child)]
            if inst.out is not None and inst.out.kind is VarKind.CONST:
                defined.add(inst.out.id)
                used.add(inst.out.id)
            for const_id in used:
                last_use[const_id] = position
            scope_uses |= used
            is_return = isinstance(operation, branch.Return) or any(self._returns[id(c)] for c in children)
            returns = returns or is_return
            if isinstance(operation, (branch.Break, branch.Continue, branch.Return)):
                may_exit = True
            elif isinstance(operation, (branch.Loop, branch.RangeLoop)):
                may_exit = is_return  # break and continue stop at the loop
            else:
                may_exit = any(self._escapes[id(c)] for c in children)
            infos.append((inst, handler, may_exit))
        dying: dict[int, list[int]] = {}
        for const_id in defined:
            dying.setdefault(last_use[const_id], []).append(const_id * 2)
        steps = tuple(
            Step(inst, handler, tuple(dying.get(position, ())), may_exit)
            for position, (inst, handler, may_exit) in enumerate(infos)
        )
        self.scopes[key] = steps
        for step in steps:
            if isinstance(step.inst.operation, branch.Loop) and _spins(self, step.inst.operation.body):
                self.spin_loops.add(id(self.scopes[id(step.inst.operation.body)]))
        self._uses[key] = frozenset(scope_uses)
        self._escapes[key] = any(step.may_exit for step in steps)
        self._returns[key] = returns
        return steps


_CONTROL_FLOW = (
    branch.If,
    branch.IfElse,
    branch.Switch,
    branch.Loop,
    branch.RangeLoop,
    branch.Break,
    branch.Continue,
    branch.Return,
)


def _spins(program: Program, body: Scope) -> bool:
    """Whether a ``loop`` with this body may spin on memory: it reads global or shared memory (a load or an
    atomic, however nested) and holds no barrier or other blocking step (those already let others run)."""
    reads = False
    for inst in _instructions(body):
        operation = inst.operation
        handler = INTERP.get(type(operation))
        if getattr(handler, "interp_control", False) and not isinstance(operation, _CONTROL_FLOW):
            return False
        if not reads:
            for field in operation.RECORD.reads:
                var = getattr(operation, field, None)
                if getattr(var, "kind", None) in (VarKind.GLOBAL, VarKind.SHARED):
                    reads = True
    return reads


def _instructions(scope: Scope) -> Iterator[Instruction]:
    for inst in scope.instructions:
        yield inst
        for child in child_scopes(inst.operation):
            yield from _instructions(child)


_PROGRAMS: OrderedDict[int, Program] = OrderedDict()
# Launches may come from several threads: a get, move_to_end and eviction must not interleave
# (another thread's eviction between a hit and move_to_end would raise KeyError).
_PROGRAMS_LOCK = fork_safe(threading.Lock())  # a child forked mid-launch must not wait on it


def prepare(kernel: KernelDefinition) -> Program:
    """The prepared program of ``kernel`` (cached: the cache holds the kernel, so ids stay unique)."""
    with _PROGRAMS_LOCK:
        program = _PROGRAMS.get(id(kernel))
        if program is not None and program.kernel is kernel:
            _PROGRAMS.move_to_end(id(kernel))
            return program
    program = Program(kernel)  # outside the lock: preparing is pure, two threads may both do it
    with _PROGRAMS_LOCK:
        _PROGRAMS[id(kernel)] = program
        while len(_PROGRAMS) > PROGRAM_CACHE_SIZE:
            _PROGRAMS.popitem(last=False)
    return program
