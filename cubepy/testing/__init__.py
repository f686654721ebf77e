"""Testing helpers: inspect expansions without launching, and cubepy's pytest plugin.

- ``expand(fn, *arg_specs, **comptime)`` and ``expand_method(cls, name, this_spec, *arg_specs)`` expand a
  cube function, kernel or method and return an ``Expansion`` (its IR text, instructions and outputs);
- ``cubepy.testing.plugin`` is the pytest plugin (registered through the ``pytest11`` entry point): a
  ``client`` fixture over the available runtimes with the sanitizer on, and the ``--cubepy-*`` options;
- ``cubepy.testing.fuzz`` and ``cubepy.testing.fuzz_control`` generate random kernels with their numpy
  reference, for differential fuzzing of the runtimes (imported on request, not by this package).

This package never imports pytest; only the plugin module does.
"""

from cubepy.frontend.testing import Expansion, expand, expand_method, spec_value

__all__ = ["Expansion", "expand", "expand_method", "spec_value"]
