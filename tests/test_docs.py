"""The documentation: every ```python block of README.md and docs/**/*.md runs, the site builds strictly,
and no tracked file points outside the repository.

Convention (docs/contributing/architecture.md, "Documentation"): the ```python blocks of one page run in
order in one namespace, as a reader would paste them; a block preceded by the line `<!-- skip -->` is
shown but not run. Blocks in other languages (```bash, ```text) are never run.
"""

from __future__ import annotations

import importlib.util
import re
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
SKIP_MARK = "<!-- skip -->"
_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)


def python_blocks(text: str) -> list[tuple[int, str]]:
    """(first line number, code) of every ```python block not preceded by the skip mark."""
    blocks = []
    for match in _FENCE.finditer(text):
        if match.group(1) != "python":
            continue
        before = text[: match.start()].rstrip().splitlines()
        if before and before[-1].strip() == SKIP_MARK:
            continue
        blocks.append((text.count("\n", 0, match.start()) + 2, match.group(2)))
    return blocks


def test_block_parser_honours_the_skip_mark() -> None:
    text = "x\n```python\na = 1\n```\n<!-- skip -->\n```python\nb = 2\n```\n```bash\nls\n```\n"
    assert python_blocks(text) == [(3, "a = 1\n")]


def _page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


@pytest.mark.parametrize("page", [p for p in PAGES if python_blocks(p.read_text())], ids=_page_id)
def test_python_blocks_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each block runs from a real file (so `@cube` finds its source) in the page's shared namespace."""
    monkeypatch.chdir(tmp_path)  # blocks that write files (CUBEPY_DUMP) write them here
    blocks = python_blocks(page.read_text())
    if any(re.search(r"^\s*import torch\b", code, re.M) for _, code in blocks):
        pytest.importorskip("torch", reason=f"{_page_id(page)} runs PyTorch, which is not installed")
    namespace: dict = {}
    for number, (line, code) in enumerate(blocks):
        path = tmp_path / f"{page.stem.replace('-', '_')}_block{number}.py"
        path.write_text("\n" * (line - 1) + code)  # keep the page's line numbers in tracebacks
        try:
            namespace = runpy.run_path(str(path), init_globals=namespace, run_name="__docs__")
        except Exception as err:
            raise AssertionError(f"{_page_id(page)}:{line}: the code block failed: {err!r}") from err


def test_every_docs_page_is_in_the_nav() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    active = "\n".join(line for line in nav.splitlines() if not line.lstrip().startswith("#"))
    pages = [_page_id(p)[len("docs/") :] for p in PAGES if p.parent != ROOT]
    assert [p for p in pages if p not in active] == []


_OUTSIDE = re.compile(
    r"API\.md|tma-semantics|ptx-lowering|\.\./shared|shared/reference|shared/design|"
    r"cubecl-model|style-anchors|ARCHITECTURE\.md|ptx-vs-nvcc|peers\.md"
)


def test_no_tracked_file_points_outside_the_repository() -> None:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout to list the tracked files")
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    found = []
    for name in files.splitlines():
        path = ROOT / name
        if name == "tests/test_docs.py" or not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for lineno, line in enumerate(text.splitlines(), 1):
            if _OUTSIDE.search(line):
                found.append(f"{name}:{lineno}: {line.strip()}")
    assert found == [], "references to documents outside the repository:\n" + "\n".join(found)


@pytest.mark.slow  # about two minutes with the pictures; .ci/run builds the site strictly on every run
@pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("mkdocstrings") is None,
    reason="mkdocs/mkdocstrings not installed (pip install -e '.[docs]')",
)
def test_site_builds_strictly(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-8000:]
    assert (tmp_path / "site" / "api" / "cubepy" / "index.html").is_file()


def test_every_setting_is_documented() -> None:
    from cubepy import config

    page = (ROOT / "docs" / "semantics" / "environment.md").read_text()
    missing = [name for name in config.KNOBS if f"`{name}`" not in page]
    assert not missing, f"settings missing from docs/semantics/environment.md: {missing}"
