"""Pictures of tensor-map copies, swizzles, layouts and coverage: data (``Picture``) apart from drawing.

``show(obj, path=None, **coords)`` computes a ``Picture`` and writes it to ``path`` (.svg/.png through
matplotlib, the ``viz`` extra; .txt plain text) or prints it (ANSI colours on a terminal).
"""

from cubepy.viz.picture import Panel, Picture
from cubepy.viz.show import output, picture_of, show

__all__ = ["Panel", "Picture", "output", "picture_of", "show"]
