"""``cubepy.files.write_atomically``: whole files or none, no temporary left behind."""

from __future__ import annotations

import os

import pytest

from cubepy.files import write_atomically


def test_writes_the_whole_file_and_replaces_an_old_one(tmp_path):
    target = tmp_path / "deep" / "entry.bin"
    write_atomically(target, b"first")
    write_atomically(target, b"second version")
    assert target.read_bytes() == b"second version"
    assert sorted(p.name for p in target.parent.iterdir()) == ["entry.bin"]


def test_a_failed_write_removes_its_temporary_file(tmp_path, monkeypatch):
    def refuse(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError, match="disk full"):
        write_atomically(tmp_path / "entry.bin", b"data")
    assert list(tmp_path.iterdir()) == []
