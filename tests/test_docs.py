"""Every Python example in the README and the documentation runs, and no file points outside the repository.

A page's ```python blocks run in order in one namespace (later blocks use earlier names).  A block meant to
be read, not run (it needs a GPU, or shows a fragment), is preceded by the line ``<!-- skip -->``.
"""

from __future__ import annotations

import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCK = re.compile(r"(?P<skip><!-- skip -->\s*\n)?```python\n(?P<code>.*?)```", re.S)


def python_blocks(page: Path) -> list[str]:
    """The runnable ```python blocks of a page."""
    return [m.group("code") for m in BLOCK.finditer(page.read_text()) if not m.group("skip")]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_examples_run(page, tmp_path, monkeypatch):
    blocks = python_blocks(page)
    if not blocks:
        pytest.skip("no runnable examples on this page")
    monkeypatch.chdir(tmp_path)  # examples that write files write them here
    # The page runs as a module of its own (derived cube types resolve annotations in their module).
    module = types.ModuleType(f"docs_{page.stem.replace('-', '_')}")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    namespace = module.__dict__
    for number, code in enumerate(blocks, 1):
        # Each block is a file, so @cube reads its source as it would from a user's module.
        source = tmp_path / f"{page.stem.replace('-', '_')}_block{number}.py"
        source.write_text(code)
        exec(compile(code, str(source), "exec"), namespace)  # noqa: S102 - the documentation's own examples


def test_the_harness_finds_blocks_and_honours_skip(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("text\n```python\nx = 1\n```\n<!-- skip -->\n```python\nraise SystemExit\n```\n")
    assert python_blocks(page) == ["x = 1\n"]


OUTSIDE = re.compile(r"\.\./shared|shared/(design|reference|seed)|\bAPI\.md\b|tma-semantics\.md|ptx-lowering\.md|"
                     r"cubecl-model\.md|style-anchors\.md|ptx-vs-nvcc\.md|ARCHITECTURE\.md|peers\.md")


def test_no_file_points_outside_the_repository():
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    offenders = []
    for name in files:
        path = ROOT / name
        if path.suffix not in (".py", ".md", ".toml", ".yml", ".yaml", ".txt", ".cfg") or name == "tests/test_docs.py":
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if OUTSIDE.search(line):
                offenders.append(f"{name}:{number}: {line.strip()[:100]}")
    assert not offenders, "files point to documents outside the repository:\n" + "\n".join(offenders)


def test_every_setting_is_documented():
    from cubepy import config

    page = (ROOT / "docs" / "semantics" / "settings.md").read_text()
    missing = [name for name in config.KNOBS if f"`{name}`" not in page]
    assert not missing, f"settings missing from docs/semantics/settings.md: {missing}"
