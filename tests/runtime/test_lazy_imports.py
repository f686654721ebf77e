"""``import cubepy`` stays light: ml_dtypes (bf16, ~1 s) and llvmlite load only when first needed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _imported_modules(code: str) -> set[str]:
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr
    names = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip())
    return names


def test_import_cubepy_loads_neither_ml_dtypes_nor_llvmlite():
    names = _imported_modules("import cubepy")
    assert "cubepy" in names
    assert not {n for n in names if n == "ml_dtypes" or n.startswith("ml_dtypes.")}
    assert not {n for n in names if n == "llvmlite" or n.startswith("llvmlite.")}


def test_an_f32_launch_on_the_interp_runtime_does_not_load_ml_dtypes():
    code = (
        "import sys, numpy as np, cubepy as cp\n"
        "from examples import vector_add\n"
        "vector_add.run(cp.client('interp'))\n"
        "assert 'ml_dtypes' not in sys.modules, 'ml_dtypes loaded'\n"
    )
    names = _imported_modules(code)
    assert "ml_dtypes" not in names


def test_a_small_fma_launch_on_the_interp_does_not_build_the_native_fma():
    # examples.vector_add.run's axpy is one fma over 1000 lanes: below BUILD_MIN_LANES, so no llvmlite (0.3 s)
    code = (
        "import sys, numpy as np, cubepy as cp\n"
        "from examples import vector_add\n"
        "vector_add.run(cp.client('interp'))\n"
        "assert 'llvmlite' not in sys.modules, 'llvmlite loaded'\n"
    )
    names = _imported_modules(code)
    assert "cubepy.runtime.interp.native_fma" in names
    assert not {n for n in names if n == "llvmlite" or n.startswith("llvmlite.")}


def test_bf16_still_resolves_to_ml_dtypes_on_first_use():
    code = (
        "import numpy as np, cubepy as cp, ml_dtypes\n"
        "from cubepy.runtime.interp.values import numpy_dtype\n"
        "from cubepy.runtime.tensormap import TMA_ELEM_TYPES\n"
        "assert cp.bf16.numpy == np.dtype(ml_dtypes.bfloat16)\n"
        "assert numpy_dtype(cp.bf16.ir) == np.dtype(ml_dtypes.bfloat16)\n"
        "assert cp.frontend.elem.to_elem(np.dtype(ml_dtypes.bfloat16)) is cp.bf16.ir\n"
        "assert cp.bf16.max_value() > 3e38\n"
        "assert isinstance(cp.bf16(1.5), ml_dtypes.bfloat16)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_cache_keys_never_load_hashlib():
    # hashlib (OpenSSL, 3-4 ms) may come with the interpreter's own start-up (site); cubepy's keys use
    # CPython's own SHA-256 module instead, so neither the import nor the first key loads it.
    at_start = _imported_modules("pass")
    names = _imported_modules("import cubepy")
    assert "hashlib" in at_start or "hashlib" not in names
    code = (
        "import sys, hashlib as reference\n"
        "del sys.modules['hashlib']\n"
        "import cubepy as cp\n"
        "from cubepy.runtime import cache\n"
        "from cubepy.hashing import sha256\n"
        "import cubepy.compiler.libdevice\n"
        "assert cache.install_fingerprint() == cache.install_fingerprint() and len(cache.install_fingerprint()) == 64\n"
        "assert sha256(b'abc').hexdigest() == reference.sha256(b'abc').hexdigest()\n"
        "assert all(getattr(cp, name) is not None for name in cp.__all__)\n"
        "assert 'hashlib' not in sys.modules, 'a cache key loaded hashlib'\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
