"""Encoding TMA descriptors with the driver: ``TensorMapArg.encode_params`` -> ``cuTensorMapEncodeTiled/Im2col``.

``TensorMapArg`` already checked every encoder rule (on every runtime), so a refusal by the driver here
means the rules and the driver disagree; it is reported as a ``TensorMapError`` that names the call,
the driver's error and every argument, so the missing rule can be added to ``cubepy.runtime.tensormap``.
"""

from __future__ import annotations

import ctypes
from typing import Any

from cubepy.errors import TensorMapError
from cubepy.runtime.cuda.driver import driver_error
from cubepy.runtime.tensormap import CU_ENUM_VALUES, TensorMapArg

TENSOR_MAP_BYTES = TensorMapArg.DESCRIPTOR_BYTES

# encode_params key -> the cuda-bindings enum class its value belongs to
_ENUM_CLASSES = {
    "tensorDataType": "CUtensorMapDataType",
    "interleave": "CUtensorMapInterleave",
    "swizzle": "CUtensorMapSwizzle",
    "l2Promotion": "CUtensorMapL2promotion",
    "oobFill": "CUtensorMapFloatOOBfill",
}
# Argument order of each call after ``tensorMap`` (an output in cuda-bindings, returned not passed).
TILED_ORDER = (
    "tensorDataType",
    "tensorRank",
    "globalAddress",
    "globalDim",
    "globalStrides",
    "boxDim",
    "elementStrides",
    "interleave",
    "swizzle",
    "l2Promotion",
    "oobFill",
)
IM2COL_ORDER = (
    "tensorDataType",
    "tensorRank",
    "globalAddress",
    "globalDim",
    "globalStrides",
    "pixelBoxLowerCorner",
    "pixelBoxUpperCorner",
    "channelsPerPixel",
    "pixelsPerColumn",
    "elementStrides",
    "interleave",
    "swizzle",
    "l2Promotion",
    "oobFill",
)


def encode_call(params: dict[str, Any]) -> tuple[str, tuple[str, ...]]:
    """Which driver call encodes these parameters, and its argument names in order."""
    if "boxDim" in params:
        return "cuTensorMapEncodeTiled", TILED_ORDER
    return "cuTensorMapEncodeIm2col", IM2COL_ORDER


def driver_arguments(params: dict[str, Any], driver: Any) -> list[Any]:
    """The positional arguments of the encode call, as cuda-bindings types.

    Enum names become the driver's enum members, ``globalDim``/``globalStrides`` lists of
    ``cuuint64_t``, ``boxDim``/``elementStrides`` lists of ``cuuint32_t``; corners stay plain ints
    (``const int*`` in C), scalars plain ints.
    """
    _, order = encode_call(params)
    arguments = []
    for key in order:
        value = params[key]
        if key in _ENUM_CLASSES:
            arguments.append(getattr(driver, _ENUM_CLASSES[key])(CU_ENUM_VALUES[value]))
        elif key in ("globalDim", "globalStrides"):
            arguments.append([driver.cuuint64_t(int(v)) for v in value])
        elif key in ("boxDim", "elementStrides"):
            arguments.append([driver.cuuint32_t(int(v)) for v in value])
        elif key in ("pixelBoxLowerCorner", "pixelBoxUpperCorner"):
            arguments.append([int(v) for v in value])
        else:
            arguments.append(int(value))
    return arguments


def describe(params: dict[str, Any]) -> str:
    """Every encode argument on one line each, for error messages."""
    call, order = encode_call(params)
    lines = [f"  {key} = {hex(params[key]) if key == 'globalAddress' else params[key]}" for key in order]
    return f"{call} arguments:\n" + "\n".join(lines)


def descriptor_bytes(tensor_map: Any) -> bytes:
    """The 128 bytes of a cuda-bindings ``CUtensorMap`` (what the kernel takes by value)."""
    return ctypes.string_at(int(tensor_map.getPtr()), TENSOR_MAP_BYTES)


def encode(arg: TensorMapArg, base_address: int, driver: Any) -> bytes:
    """Encode ``arg`` for the allocation at ``base_address``; the descriptor's 128 bytes."""
    params = arg.encode_params(base_address)  # re-checks the final address's alignment (rule 3)
    call, _ = encode_call(params)
    arguments = driver_arguments(params, driver)
    try:
        result = getattr(driver, call)(*arguments)
    except (TypeError, ValueError, OverflowError) as exc:  # cuda-bindings refusing a value's type or range
        raise TensorMapError(f"{call} could not take its arguments ({exc}) for {arg!r}\n{describe(params)}") from exc
    if int(result[0]) != 0:
        raise driver_error(
            driver,
            result[0],
            call,
            f"cubepy's checks accepted {arg!r} but the driver did not; {describe(params)}",
            TensorMapError,
        )
    return descriptor_bytes(result[1])
