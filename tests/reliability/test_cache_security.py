"""The disk cache cannot be used to run foreign code: private folders, sealed entries, a restricted unpickler.

Each case plants or damages what an attacker or a bad disk could (a pickle that runs a command, a flipped bit,
a wrong type, a folder or key others can write) and checks that the next launch neither runs it nor trusts it:
the result is the one numpy gives, the bad entry is gone, and a warning or debug line says what happened.
"""

from __future__ import annotations

import os
import pickle
import stat
import struct
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

import cubepy as cp
from cubepy import config
from cubepy.runtime import cache
from cubepy.runtime.client import ComputeClient
from cubepy.runtime.interp.backend import InterpBackend
from cubepy.sealed import KEY_NAME, MAGIC, TAG_BYTES, CacheSecurityWarning, forget_folders, sealed_folder

ROOT = Path(__file__).resolve().parents[2]


@cp.cube(launch=True)
def add_one_and_a_half(data: cp.Array[cp.f32], out: cp.Array[cp.f32]):
    i = cp.ABSOLUTE_POS
    if i < data.len():
        out[i] = data[i] + cp.f32(1.5)


def _run(client=None) -> np.ndarray:
    client = client or ComputeClient("interp", InterpBackend())
    data = client.create(np.arange(32, dtype=np.float32))
    out = client.zeros((32,), np.float32)
    add_one_and_a_half.launch(client, cp.CubeCount(1), cp.CubeDim(32), cp.ArrayArg(data), cp.ArrayArg(out))
    return client.read(out)


EXPECTED = np.arange(32, dtype=np.float32) + np.float32(1.5)


@pytest.fixture
def root(tmp_path):
    forget_folders()
    folder = tmp_path / "cache"
    with config.override(CUBEPY_CACHE_DIR=str(folder)):
        yield folder
    forget_folders()


def _entry(root: Path) -> Path:
    (entry,) = sorted(root.rglob("*.pkl"))
    return entry


class _RunsACommand:
    """Unpickling this calls ``os.system``: what a planted entry would do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_the_folder_and_key_are_created_private_even_under_umask_0(root):
    previous = os.umask(0)
    try:
        np.testing.assert_array_equal(_run(), EXPECTED)
    finally:
        os.umask(previous)
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    assert stat.S_IMODE((root / KEY_NAME).stat().st_mode) == 0o600
    assert len((root / KEY_NAME).read_bytes()) == 32


def test_a_planted_pickle_is_never_unpickled(root, tmp_path):
    _run()
    entry = _entry(root)
    marker = tmp_path / "owned"
    # What a format-2 entry was: a magic prefix and a plain pickle (no seal).
    entry.write_bytes(b"cubepy-cache\0" + pickle.dumps((entry.stem, _RunsACommand(marker))))
    np.testing.assert_array_equal(_run(), EXPECTED)
    assert not marker.exists()
    assert sealed_folder(root).read(entry.relative_to(root).as_posix()) is not None  # rebuilt and sealed


def test_a_sealed_entry_naming_a_function_is_refused_by_the_unpickler(root, tmp_path, capsys):
    # Even bytes under a valid seal (as if the key leaked) cannot reach os.system: the unpickler allows cubepy's
    # IR and artifact classes only.
    _run()
    entry = _entry(root)
    relative = entry.relative_to(root).as_posix()
    marker = tmp_path / "owned"
    sealed_folder(root).write(relative, pickle.dumps((entry.stem, _RunsACommand(marker))))
    with config.override(CUBEPY_DEBUG=1):
        np.testing.assert_array_equal(_run(), EXPECTED)
    assert not marker.exists()
    assert "which is not a cubepy artifact class" in capsys.readouterr().err


def test_every_single_bit_flip_is_a_miss(root):
    _run()
    entry = _entry(root)
    good = entry.read_bytes()
    store = cache.DiskCache(root, "interp")
    rng = np.random.default_rng(0)
    positions = sorted(set(rng.integers(0, len(good), 40).tolist()) | {0, len(MAGIC), len(MAGIC) + TAG_BYTES})
    for position in positions:
        damaged = bytearray(good)
        damaged[position] ^= 1 << int(rng.integers(0, 8))
        entry.write_bytes(bytes(damaged))
        assert store.load(entry.stem) is None, f"a flipped bit at byte {position} was trusted"
        assert not entry.exists()  # removed, so the next launch rebuilds it
    entry.write_bytes(good)
    assert store.load(entry.stem) is not None


def test_a_flipped_constant_gives_the_right_result_not_a_near_one(root):
    # The probe's case: one bit in the f32 constant 1.5 gave x + 1.500244 on every later run.
    _run()
    entry = _entry(root)
    data = bytearray(entry.read_bytes())
    at = bytes(data).find(b"G" + struct.pack(">d", 1.5), len(MAGIC) + TAG_BYTES)  # pickle's BINFLOAT of 1.5
    assert at > 0
    data[at + 6] ^= 0x20  # a low mantissa bit: 1.5 becomes a nearby float
    entry.write_bytes(bytes(data))
    np.testing.assert_array_equal(_run(), EXPECTED)


def test_an_entry_of_the_wrong_type_is_removed(root, capsys):
    _run()
    entry = _entry(root)
    sealed_folder(root).write(entry.relative_to(root).as_posix(), pickle.dumps((entry.stem, {"not": "a kernel"})))
    with config.override(CUBEPY_DEBUG=1):
        np.testing.assert_array_equal(_run(), EXPECTED)
    assert "not a KernelDefinition" in capsys.readouterr().err
    assert isinstance(cache.DiskCache(root, "interp").load(entry.stem), cp.ir.KernelDefinition)


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o722])
def test_a_folder_others_may_write_is_refused_with_a_warning(root, mode):
    root.mkdir()
    os.chmod(root, mode)
    with pytest.warns(CacheSecurityWarning, match=f"group or others may write it.*{mode:04o}"):
        np.testing.assert_array_equal(_run(), EXPECTED)
    assert not list(root.rglob("*.pkl")) and not (root / KEY_NAME).exists()  # ran uncached


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="changing a folder's owner needs root")
def test_a_folder_owned_by_another_user_is_refused(root):
    root.mkdir(mode=0o700)
    os.chown(root, 65534, 65534)
    with pytest.warns(CacheSecurityWarning, match="owned by uid 65534"):
        np.testing.assert_array_equal(_run(), EXPECTED)
    assert not list(root.rglob("*.pkl"))


def test_a_key_others_may_read_is_refused(root):
    _run()
    os.chmod(root / KEY_NAME, 0o644)
    forget_folders()
    with pytest.warns(CacheSecurityWarning, match="may be read by others"):
        np.testing.assert_array_equal(_run(), EXPECTED)


def test_a_key_cut_short_is_replaced_and_old_entries_miss(root):
    _run()
    entry = _entry(root)
    (root / KEY_NAME).write_bytes(b"short")
    forget_folders()
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheSecurityWarning)
        assert cache.DiskCache(root, "interp").load(entry.stem) is None
    assert len((root / KEY_NAME).read_bytes()) == 32


def test_a_symlinked_key_is_refused(root, tmp_path):
    _run()
    elsewhere = tmp_path / "their-key"
    elsewhere.write_bytes(b"k" * 32)
    os.chmod(elsewhere, 0o600)
    (root / KEY_NAME).unlink()
    (root / KEY_NAME).symlink_to(elsewhere)
    forget_folders()
    with pytest.warns(CacheSecurityWarning, match="not a regular file"):
        np.testing.assert_array_equal(_run(), EXPECTED)


def test_an_unwritable_location_only_costs_the_reuse(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("in the way")
    forget_folders()
    with config.override(CUBEPY_CACHE_DIR=str(blocker / "cache")), warnings.catch_warnings():
        warnings.simplefilter("error", CacheSecurityWarning)
        np.testing.assert_array_equal(_run(), EXPECTED)


CPU_FLIP = """
import sys
import numpy as np
import cubepy as cp

@cp.cube(launch=True)
def scale(data: cp.Array[cp.f32]):
    i = cp.ABSOLUTE_POS
    if i < data.len():
        data[i] = data[i] * cp.f32(3.0)

client = cp.client("cpu")
data = client.create(np.arange(64, dtype=np.float32))
scale.launch(client, cp.CubeCount(2), cp.CubeDim(32), cp.ArrayArg(data))
assert np.array_equal(client.read(data), np.arange(64, dtype=np.float32) * 3), client.read(data)
print("ok")
"""


def test_damaged_cpu_object_code_is_never_mapped(tmp_path):
    pytest.importorskip("llvmlite")
    if cp.client("cpu") is None:  # pragma: no cover - the cpu runtime is always present where llvmlite is
        pytest.skip("no cpu runtime")
    script = tmp_path / "flip.py"
    script.write_text(textwrap.dedent(CPU_FLIP))
    env = dict(os.environ, CUBEPY_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(ROOT))

    def run() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)

    first = run()
    assert first.stdout.strip() == "ok", first.stderr[-2000:]
    (entry,) = sorted((tmp_path / "cache" / "cpu").rglob("*.pkl"))
    good = entry.read_bytes()
    # Flip bits in the middle of the payload, where the object code lies, and at its end.
    for position in (len(good) // 2, len(good) * 3 // 4, len(good) - 1):
        damaged = bytearray(good)
        damaged[position] ^= 0xFF
        entry.write_bytes(bytes(damaged))
        result = run()
        assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]
