"""Benchmarks: run ``python -m benchmarks`` (see README); figures are medians, never asserted in tests."""
