"""The ``Layout`` protocol (CubeCL's ``Layout`` trait) and the launch machinery of layouts made of layouts.

A layout maps the coordinates of a conceptual tensor (``Coordinates``) to those of the storage it wraps
(``SourceCoordinates``).  Every method is a ``@cube`` method, so it runs at expansion time and leaves
only the index arithmetic it needs in the IR.  Concrete layouts are ``@cp.derive(cp.CubeType,
cp.CubeLaunch)`` classes; layouts that wrap layouts of any type (``Chain``, ``Transpose``,
``VirtualLayout``) derive from ``CompositeLayout``, which launches each part through its own type.
"""

from __future__ import annotations

from typing import ClassVar

import attrs

import cubepy as cp
from cubepy import cube


class Layout(cp.CubeType):
    """Base of every layout: ``to_source_pos``, ``to_source_pos_checked``, ``shape``, ``is_in_bounds``."""

    Coordinates: ClassVar[object] = None
    SourceCoordinates: ClassVar[object] = None

    @cube
    def to_source_pos(self, pos):
        """The storage coordinates of ``pos`` (absolute positions)."""
        raise NotImplementedError(f"{type(self).__name__}.to_source_pos")

    @cube
    def shape(self):
        """The shape of the conceptual tensor (not necessarily of the storage)."""
        raise NotImplementedError(f"{type(self).__name__}.shape")

    @cube
    def is_in_bounds(self, pos):
        """Whether ``pos`` lies inside the conceptual tensor."""
        raise NotImplementedError(f"{type(self).__name__}.is_in_bounds")

    @cube
    def to_source_pos_checked(self, pos):
        """``(to_source_pos(pos), is_in_bounds(pos))``."""
        return (self.to_source_pos(pos), self.is_in_bounds(pos))


def layout_type_of(runtime_arg) -> type:
    """The layout class a runtime argument (``SomeLayout.Launch(...)``) launches."""
    owner = getattr(type(runtime_arg), "__layout_type__", None)
    if owner is None:
        raise cp.LaunchError(f"expected a layout's Launch value, got {type(runtime_arg).__name__}")
    return owner


def launchable(cls: type) -> type:
    """Class decorator (below nothing, above ``derive``): lets composite layouts find ``cls`` from its Launch."""
    cls.Launch.__layout_type__ = cls
    return cls


@attrs.frozen
class PartArg:
    """The compilation argument of one part of a composite layout: its layout class and its own argument."""

    layout: type
    arg: object


class CompositeLayout(Layout):
    """A layout whose ``PARTS`` are layouts of any type; launched part by part, comptime ``OPTIONS`` as is."""

    PARTS: ClassVar[tuple[str, ...]] = ()
    OPTIONS: ClassVar[tuple[str, ...]] = ()

    def __init__(self, *values) -> None:
        names = self.PARTS + self.OPTIONS
        if len(values) > len(names):
            raise TypeError(f"{type(self).__name__} takes {names}, got {len(values)} values")
        for name, value in zip(names, values):
            setattr(self, name, value)
        for name in names[len(values) :]:
            setattr(self, name, self.default_option(name))

    def default_option(self, name: str):
        """The value of an option that was not given (a missing part is an error)."""
        raise TypeError(f"{type(self).__name__} is missing {name!r}")

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        cls.ExpandType = cls
        names = cls.PARTS + cls.OPTIONS

        class Launch:
            """The runtime argument: each part's own Launch value, then the comptime options."""

            __layout_type__ = cls

            def __init__(self, *values) -> None:
                self.values = values

        Launch.__name__ = Launch.__qualname__ = f"{cls.__name__}Launch"
        cls.Launch = cls.RuntimeArg = Launch
        cls.CompilationArg = attrs.make_class(
            f"{cls.__name__}CompilationArg", {name: attrs.field() for name in names}, frozen=True
        )
        cls.CompilationArg.__launch_type__ = cls

    @classmethod
    def compilation_arg(cls, runtime_arg):
        """Each part's compilation argument (tagged with its layout class), then the options."""
        if not isinstance(runtime_arg, cls.Launch):
            raise cp.LaunchError(f"expected {cls.__name__}.Launch(...), got {type(runtime_arg).__name__}")
        values = list(runtime_arg.values)
        parts = [PartArg(layout_type_of(v), layout_type_of(v).compilation_arg(v)) for v in values[: len(cls.PARTS)]]
        options = values[len(cls.PARTS) :]
        return cls.CompilationArg(*parts, *options)

    @classmethod
    def register(cls, runtime_arg, bindings) -> None:
        """Bind each part's runtime fields, in part order."""
        for value in runtime_arg.values[: len(cls.PARTS)]:
            layout_type_of(value).register(value, bindings)

    @classmethod
    def expand(cls, comp_arg, builder):
        """Declare each part's parameters and build the composite expand value."""
        parts = []
        for name in cls.PARTS:
            part: PartArg = getattr(comp_arg, name)
            with builder.naming(name):
                parts.append(part.layout.expand(part.arg, builder))
        options = [getattr(comp_arg, name) for name in cls.OPTIONS]
        return cls(*parts, *options)

    expand_output = expand

    @classmethod
    def is_compilation_arg(cls, value) -> bool:
        """Whether ``value`` is already this layout's compilation argument."""
        return isinstance(value, cls.CompilationArg)
