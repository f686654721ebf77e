"""Match a kernel's ``# CHECK`` comments against text it compiled to (PTX, LLVM), with LLVM's FileCheck rules."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path


def filecheck(kernel, text: str, tmp_path: Path) -> None:
    """Fail with both texts unless ``text`` satisfies the ``# CHECK`` lines in ``kernel``'s source (a kernel,
    a cube function or a plain function)."""
    checks = tmp_path / "checks.py"
    checks.write_text(inspect.getsource(getattr(kernel, "fn", kernel)))
    printed = tmp_path / "out.txt"
    printed.write_text(text)
    result = subprocess.run(
        [sys.executable, "-m", "filecheck", str(checks), "--input-file", str(printed)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, f"filecheck failed:\n{result.stdout}{result.stderr}\ninput:\n{text}"
