"""Reliability checks: the interp's sanitizer, differential fuzzing, bad inputs and concurrency.

- ``test_sanitizer``: deliberately buggy kernels, each flagged with the right kind, unit, index and line;
  ``test_sanitizer_no_false_alarms``: their correct twins, which run without a report.
- ``test_fuzz`` (+ ``cubepy.testing.fuzz``): random kernels on the interp against numpy, compiled to a
  cubin too; ``CUBEPY_FUZZ_EXAMPLES=N`` for a long run.
- ``test_bad_inputs``: a table of bad kernels and launch arguments, each with an actionable error.
- ``test_concurrency``: threads on one client, processes on one cache folder.

The whole runtime suite under the sanitizer: ``CUBEPY_SANITIZE=1 python -m pytest tests/runtime``
(tests marked ``races_by_design`` skip themselves then), or ``python -m pytest -m slow
tests/reliability/test_sanitized_suite.py``.
"""
