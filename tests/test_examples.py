"""Every example module runs on the interp and matches its numpy reference."""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

EXAMPLES = sorted(m.name for m in pkgutil.iter_modules([str(ROOT / "examples")]) if not m.ispkg)


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_matches_numpy(client, name):
    module = importlib.import_module(f"examples.{name}")
    errors = module.run(client)
    assert errors, f"examples/{name}.py run() reported nothing"
    for what, err in errors.items():
        assert err < 1e-3, f"{name}: {what} = {err}"
