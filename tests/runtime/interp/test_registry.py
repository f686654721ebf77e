"""The interp's handler table: each handler module declares its op families, and a lookup imports only those."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

from cubepy.runtime.interp.registry import INTERP, declared_families

ROOT = Path(__file__).resolve().parents[3]


def test_each_handler_module_declares_exactly_the_families_of_its_handlers():
    handled: dict[str, set[str]] = {}
    for cls, handler in INTERP.load().implementations.items():
        handled.setdefault(handler.__module__, set()).add(cls.RECORD.family)
    declared: dict[str, set[str]] = {}
    for family, modules in INTERP.by_family.items():
        for module in modules:
            declared.setdefault(module, set()).add(family)
    assert declared == handled
    for module, families in declared.items():  # the source line the registry reads is the module's own value
        assert set(importlib.import_module(module).OP_FAMILIES) == families, module


def test_a_new_handler_module_is_found_without_being_listed(tmp_path):
    (tmp_path / "alpha.py").write_text('"""A."""\n\nimport numpy\n\nOP_FAMILIES = ("arith", "tma")  # why\n')
    (tmp_path / "beta.py").write_text('OP_FAMILIES = ("tma",)\nX = 1\n')
    (tmp_path / "helper.py").write_text('"""Mentions OP_FAMILIES = ("sync",) but declares none."""\n')
    (tmp_path / "notes.txt").write_text('\nOP_FAMILIES = ("mma",)\n')
    found = declared_families(os.fspath(tmp_path), "pkg")
    assert found == {"arith": ("pkg.alpha",), "tma": ("pkg.alpha", "pkg.beta")}


def test_a_lookup_imports_its_family_and_not_the_others():
    code = (
        "import sys\n"
        "from cubepy.ir import ops\n"
        "from cubepy.runtime.interp.registry import INTERP\n"
        "assert INTERP.get(ops.DebugPrint) is not None\n"
        "loaded = {name.rpartition('.')[2] for name in sys.modules if name.startswith('cubepy.runtime.interp.')}\n"
        "assert 'printing' in loaded, loaded\n"
        "assert not loaded & {'wgmma', 'mma', 'cluster', 'async_copy', 'warp_specialize'}, loaded\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
