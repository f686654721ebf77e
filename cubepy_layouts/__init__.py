"""cubepy_layouts: CubeCL's layout and view library, and convolution layouts, written in the cubepy DSL.

| module | contents |
|---|---|
| ``layout`` | the ``Layout`` protocol, ``CompositeLayout`` (layouts of layouts, launched part by part) |
| ``coords`` | ``Coords1d..Coords5d``, ``BatchedCoords`` and element-wise coordinate helpers |
| ``view`` | ``View``: storage read and written through a layout |
| ``plain``, ``strided``, ``permuted``, ``slice`` | the std layouts over linear storage |
| ``chain``, ``transpose``, ``virtual`` | layouts that wrap layouts |
| ``evaluate``, ``pictures`` | running a layout's methods on the host; ``show``/``picture``: pictures of layouts and views |
| ``conv`` | ``ConvolutionProblem``, the convolution layouts and ``conv2d_fprop``/``conv2d_wgrad`` |
"""

from cubepy_layouts.chain import Chain
from cubepy_layouts.coords import (
    BatchedCoords,
    Coords1d,
    Coords1i,
    Coords2d,
    Coords2i,
    Coords3d,
    Coords3i,
    Coords4d,
    Coords5d,
    coords_add,
    coords_in_bounds,
    coords_max,
    coords_min,
    coords_sub,
)
from cubepy_layouts.layout import CompositeLayout, Layout
from cubepy_layouts.permuted import PermutedLayout
from cubepy_layouts.pictures import picture, show
from cubepy_layouts.plain import PlainLayout
from cubepy_layouts.slice import SliceLayout
from cubepy_layouts.strided import StridedLayout
from cubepy_layouts.transpose import Transpose
from cubepy_layouts.view import View
from cubepy_layouts.virtual import VirtualLayout

__all__ = [
    "Layout",
    "CompositeLayout",
    "View",
    "VirtualLayout",
    "Coords1d",
    "Coords1i",
    "Coords2d",
    "Coords2i",
    "Coords3d",
    "Coords3i",
    "Coords4d",
    "Coords5d",
    "BatchedCoords",
    "coords_add",
    "coords_sub",
    "coords_min",
    "coords_max",
    "coords_in_bounds",
    "PlainLayout",
    "StridedLayout",
    "PermutedLayout",
    "SliceLayout",
    "Chain",
    "Transpose",
    "picture",
    "show",
]
