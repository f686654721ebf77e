"""The settings registry reads the environment as it is now, on every call (the warm launch reads knobs)."""

from __future__ import annotations

import pytest

from cubepy import config
from cubepy.errors import CubeError


def test_a_knob_follows_the_environment_as_it_changes(monkeypatch):
    monkeypatch.delenv("CUBEPY_CPU_THREADS", raising=False)
    assert config.get("CUBEPY_CPU_THREADS") == config.KNOBS["CUBEPY_CPU_THREADS"].default
    monkeypatch.setenv("CUBEPY_CPU_THREADS", "3")
    assert config.get("CUBEPY_CPU_THREADS") == 3
    monkeypatch.setenv("CUBEPY_CPU_THREADS", "1")
    assert config.get("CUBEPY_CPU_THREADS") == 1
    monkeypatch.delenv("CUBEPY_CPU_THREADS")
    assert config.get("CUBEPY_CPU_THREADS") == config.KNOBS["CUBEPY_CPU_THREADS"].default


def test_an_override_wins_over_the_environment_and_a_bad_value_names_the_knob(monkeypatch):
    monkeypatch.setenv("CUBEPY_CPU_THREADS", "2")
    with config.override(CUBEPY_CPU_THREADS=5):
        assert config.get("CUBEPY_CPU_THREADS") == 5
    assert config.get("CUBEPY_CPU_THREADS") == 2
    monkeypatch.setenv("CUBEPY_CPU_THREADS", "many")
    with pytest.raises(CubeError, match="CUBEPY_CPU_THREADS='many'"):
        config.get("CUBEPY_CPU_THREADS")
