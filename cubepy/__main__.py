"""``python -m cubepy``: the ``cubepy`` command (``demo``, ``compile``, ``info``, ...)."""

import sys

from cubepy.cli import main

if __name__ == "__main__":
    sys.exit(main())
