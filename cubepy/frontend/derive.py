"""``@derive(CubeType[, CubeLaunch])``: the expand and launch halves of a user class, from one field list.

On an attrs class (or a plain class with annotations), fields annotated with cube types are runtime
and fields annotated ``Comptime[...]`` are comptime.  ``derive`` generates

- ``<Name>Expand``: a subclass of the class whose instances hold expand values; ``Name(a, b)`` inside
  a kernel builds one, and the class's ``@cube`` methods (and plain Python helpers) work on it;
- with ``CubeLaunch``: ``<Name>Launch`` (the runtime argument: every field in declaration order,
  comptime ones as plain values) and ``<Name>CompilationArg`` (hashable, ``==`` by value), and the
  launch protocol on the class: ``compilation_arg``, ``register``, ``expand``, ``expand_output``.

``register`` and ``expand`` walk the same field list, so binding slots cannot drift.  Put ``@derive``
above ``@attrs.define``/``@attrs.frozen`` (it must see the final class).
"""

from __future__ import annotations

import abc
import sys
import typing
from collections.abc import Callable
from typing import Any, ClassVar, cast

import attrs

from cubepy.errors import CubeError, LaunchError
from cubepy.frontend import mutability, operations, source
from cubepy.frontend.elem import ScalarType, is_comptime_annotation
from cubepy.frontend.launch import launch_arg_of
from cubepy.frontend.state import active_state
from cubepy.frontend.values import ExpandBase
from cubepy.ir import Type


class CubeType(abc.ABC):
    """A type usable inside kernels: ``ExpandType``, ``into_mut(scope, expand)``, ``__expand_<method>`` twins."""

    ExpandType: ClassVar[type]

    @classmethod
    def into_mut(cls, scope: Any, expand: Any) -> Any:
        """A mutable copy of ``expand`` (runtime fields become mutable locals)."""
        return mutability.into_mut(expand, None)


class LaunchArg(abc.ABC):
    """A kernel parameter type: splits a runtime argument into bindings and a hashable ``CompilationArg``."""

    RuntimeArg: ClassVar[type]
    CompilationArg: ClassVar[type]

    @classmethod
    @abc.abstractmethod
    def compilation_arg(cls, runtime_arg: Any) -> Any:
        """The compile-relevant, hashable part of ``runtime_arg`` (validates it)."""

    @classmethod
    @abc.abstractmethod
    def register(cls, runtime_arg: Any, bindings: Any) -> None:
        """Bind the runtime part of ``runtime_arg`` for one launch."""

    @classmethod
    @abc.abstractmethod
    def expand(cls, comp_arg: Any, builder: Any) -> Any:
        """Declare the parameter while expanding; the value the kernel body receives."""

    @classmethod
    def expand_output(cls, comp_arg: Any, builder: Any) -> Any:
        """Like ``expand``, for a parameter the kernel writes (same declaration here)."""
        return cls.expand(comp_arg, builder)


class CubeLaunch:
    """Marker for ``derive``: also generate the launch halves (``Launch``, ``CompilationArg``)."""


@attrs.frozen
class Field:
    """One field of a derived class."""

    name: str
    annotation: object
    comptime: bool
    default: object = attrs.NOTHING

    @property
    def launch(self) -> Any:
        """The field's launch-protocol object."""
        return launch_arg_of(self.annotation, f"field {self.name!r}")


def _resolve(annotation: object, cls: type) -> object:
    if isinstance(annotation, str):
        module = sys.modules.get(cls.__module__)
        namespace = dict(vars(module)) if module is not None else {}
        try:
            return eval(annotation, namespace, dict(vars(cls)))  # noqa: S307 - the user's own annotation
        except Exception as exc:
            raise CubeError(
                f"cannot resolve the annotation {annotation!r} of {cls.__qualname__}: {exc}; "
                "define the names it uses at module level"
            ) from exc
    return annotation


def class_fields(cls: type) -> list[Field]:
    """The fields of ``cls`` in declaration order (attrs fields, else annotations along the MRO)."""
    fields: list[Field] = []
    if attrs.has(cls):
        for field in attrs.fields(cls):
            annotation = _resolve(field.type, cls)
            default = field.default
            if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
                default = attrs.NOTHING
            fields.append(Field(field.name, annotation, is_comptime_annotation(annotation), default))
        return fields
    seen: dict[str, Field] = {}
    for klass in reversed(cls.__mro__):
        for name, annotation in vars(klass).get("__annotations__", {}).items():
            annotation = _resolve(annotation, klass)
            if typing.get_origin(annotation) is ClassVar or annotation is ClassVar:
                continue
            default = vars(klass).get(name, attrs.NOTHING)
            seen[name] = Field(name, annotation, is_comptime_annotation(annotation), default)
    return list(seen.values())


def _bind(cls_name: str, fields: list[Field], args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, object]:
    if len(args) > len(fields):
        raise TypeError(f"{cls_name} takes {len(fields)} fields, got {len(args)} positional arguments")
    values = dict(zip((f.name for f in fields), args))
    for name, value in kwargs.items():
        if name in values:
            raise TypeError(f"{cls_name} got field {name!r} twice")
        if name not in {f.name for f in fields}:
            raise TypeError(f"{cls_name} has no field {name!r}")
        values[name] = value
    for field in fields:
        if field.name not in values:
            if field.default is attrs.NOTHING:
                raise TypeError(f"{cls_name} is missing field {field.name!r}")
            values[field.name] = field.default
    return values


def _expand_field(field: Field, value: Any) -> Any:
    mutability.check_bound(value)
    if field.comptime:
        if isinstance(value, ExpandBase) and not operations.is_comptime(value):
            source.fail(f"comptime field {field.name!r} got a runtime value")
        return operations.comptime_value(value) if isinstance(value, ExpandBase) else value
    if isinstance(field.annotation, ScalarType) and (isinstance(value, ExpandBase) or operations.is_number(value)):
        line = operations.as_element(value).type.line if isinstance(value, ExpandBase) else 1
        var = operations.convert(value, Type(field.annotation.ir, line), f"field {field.name!r}")
        return operations.element(var)
    return value


def _make_expand_class(cls: type, fields: list[Field]) -> type:
    def __init__(self: object, *args: Any, **kwargs: Any) -> None:
        values = _bind(cls.__name__, fields, args, kwargs)
        for field in fields:
            object.__setattr__(self, field.name, _expand_field(field, values[field.name]))

    def _cp_from_fields(klass: type[Any], values: dict[str, object]) -> Any:
        instance = object.__new__(klass)
        for field in fields:
            object.__setattr__(instance, field.name, values[field.name])
        return instance

    def __repr__(self: object) -> str:
        inner = ", ".join(f"{f.name}={getattr(self, f.name, '?')!r}" for f in fields)
        return f"{cls.__name__}Expand({inner})"

    namespace = {
        "__init__": __init__,
        "__repr__": __repr__,
        "__eq__": lambda self, other: self is other,
        "__hash__": object.__hash__,
        "__new__": staticmethod(lambda klass, *a, **k: object.__new__(klass)),
        "__cube_fields__": tuple((f.name, f.comptime) for f in fields),
        "_cp_from_fields": classmethod(_cp_from_fields),
        "__module__": cls.__module__,
        "__qualname__": f"{cls.__qualname__}Expand",
        "__doc__": f"The expand-time twin of {cls.__qualname__} (its fields hold expand values).",
    }
    return type(f"{cls.__name__}Expand", (cls,), namespace)


def _install_constructor(cls: type[Any], expand_cls: type) -> None:
    """Make ``Name(...)`` inside a kernel build a ``NameExpand`` (outside kernels it stays the class)."""
    original = cls.__dict__.get("__new__")

    def __new__(klass: type[Any], *args: Any, **kwargs: Any) -> Any:
        if klass is cls and active_state() is not None:
            return object.__new__(expand_cls)
        if original is not None:
            return (
                original.__func__(klass, *args, **kwargs)
                if isinstance(original, staticmethod)
                else original(klass, *args, **kwargs)
            )
        return super(cls, klass).__new__(klass)

    setattr(cls, "__new__", staticmethod(__new__))


def _make_launch_class(cls: type, fields: list[Field]) -> type:
    names = tuple(f.name for f in fields)

    def __init__(self: object, *args: Any, **kwargs: Any) -> None:
        values = _bind(f"{cls.__name__}.Launch", fields, args, kwargs)
        for name in names:
            object.__setattr__(self, name, values[name])

    def __repr__(self: object) -> str:
        inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in names)
        return f"{cls.__name__}Launch({inner})"

    return type(
        f"{cls.__name__}Launch",
        (),
        {
            "__slots__": names,
            "__init__": __init__,
            "__repr__": __repr__,
            "__module__": cls.__module__,
            "__qualname__": f"{cls.__qualname__}Launch",
            "__doc__": f"The runtime argument for a {cls.__qualname__} parameter (fields in declaration order).",
        },
    )


def _install_launch(cls: type, fields: list[Field]) -> None:
    launch_cls = _make_launch_class(cls, fields)
    comp_cls = attrs.make_class(f"{cls.__name__}CompilationArg", {f.name: attrs.field() for f in fields}, frozen=True)
    comp_cls.__module__ = cls.__module__
    comp_cls.__qualname__ = f"{cls.__qualname__}CompilationArg"
    runtime_fields = [f for f in fields if not f.comptime]

    def compilation_arg(klass: type, launch: object) -> Any:
        if not isinstance(launch, launch_cls):
            raise LaunchError(f"expected {cls.__name__}.Launch(...), got {type(launch).__name__}")
        values = {}
        for field in fields:
            value = getattr(launch, field.name)
            if field.comptime:
                try:
                    hash(value)
                except TypeError as exc:
                    raise LaunchError(f"comptime field {field.name!r} must be hashable") from exc
                values[field.name] = value
            else:
                try:
                    values[field.name] = field.launch.compilation_arg(value)
                except LaunchError as exc:
                    raise LaunchError(f"field {field.name!r}: {exc}") from None
        return comp_cls(**values)

    def register(klass: type, launch: object, bindings: Any) -> None:
        for field in runtime_fields:
            field.launch.register(getattr(launch, field.name), bindings)

    def expand(klass: type, comp_arg: object, builder: Any) -> Any:
        values = {}
        for field in fields:
            value = getattr(comp_arg, field.name)
            if field.comptime:
                values[field.name] = value
            else:
                with builder.naming(field.name):
                    values[field.name] = field.launch.expand(value, builder)
        return cast(Any, cls).ExpandType._cp_from_fields(values)

    def default_compilation_arg(klass: type) -> Any:
        values = {}
        for field in fields:
            if field.comptime:
                if field.default is attrs.NOTHING:
                    raise CubeError(
                        f"comptime field {field.name!r} of {cls.__name__} has no default; pass a "
                        f"{cls.__name__}.CompilationArg(...) instead of the class"
                    )
                values[field.name] = field.default
            else:
                values[field.name] = field.launch.default_compilation_arg()
        return comp_cls(**values)

    # The class gains these at decoration time, so a type checker cannot see them: set them by name.
    for name, value in (
        ("Launch", launch_cls),
        ("RuntimeArg", launch_cls),
        ("CompilationArg", comp_cls),
        ("compilation_arg", classmethod(compilation_arg)),
        ("register", classmethod(register)),
        ("expand", classmethod(expand)),
        ("expand_output", classmethod(expand)),
        ("default_compilation_arg", classmethod(default_compilation_arg)),
        ("is_compilation_arg", classmethod(lambda klass, value: isinstance(value, comp_cls))),
    ):
        setattr(cls, name, value)
    setattr(comp_cls, "__launch_type__", cls)
    abc.ABCMeta.register(LaunchArg, cls)


def derive(*traits: object) -> Callable[[type], type]:
    """Class decorator: ``@derive(CubeType)`` or ``@derive(CubeType, CubeLaunch)`` (see the module doc)."""
    for trait in traits:
        if trait not in (CubeType, CubeLaunch, LaunchArg):
            raise CubeError(f"derive: unknown trait {trait!r} (expected CubeType, CubeLaunch)")

    def apply(cls: type) -> type:
        fields = class_fields(cls)
        expand_cls = _make_expand_class(cls, fields)
        setattr(cls, "ExpandType", expand_cls)
        if "into_mut" not in cls.__dict__:
            setattr(cls, "into_mut", classmethod(lambda klass, scope, expand: mutability.into_mut(expand, None)))
        _install_constructor(cls, expand_cls)
        abc.ABCMeta.register(CubeType, cls)
        if CubeLaunch in traits or LaunchArg in traits:
            _install_launch(cls, fields)
        return cls

    return apply
