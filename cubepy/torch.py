"""cubepy kernels as PyTorch operators: ``cp.torch.custom_op(name, launcher, mutates_args=...)``.

A *launcher* is a host function ``launcher(client, *args)`` that launches cubepy kernels: tensor arguments
arrive as cubepy handles borrowing the tensors' memory (``cp.from_dlpack``, no copy), other arguments as they
are.  It returns None (an op that writes some of its arguments, named in ``mutates_args``), a handle, or a tuple
of handles (new outputs, handed back to PyTorch without a copy).  ``custom_op`` registers it through
``torch.library`` so it runs eagerly and inside ``torch.compile(fullgraph=True)`` graphs.

Which runtime runs it follows the tensors' device: CPU tensors on ``CUBEPY_RUNTIME``'s runtime when that is a
host one (``interp`` or ``cpu``), else on ``cpu`` (``interp`` where the cpu runtime is unavailable); CUDA tensors
on the ``cuda`` runtime, after the tensor's current stream has finished its queued work.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Sequence
from typing import Any

try:
    import torch
except ImportError as error:  # pragma: no cover - exercised only where torch is absent
    raise ImportError(
        "cubepy.torch needs PyTorch, which is not installed: `pip install torch` (or `pip install 'cubepy[torch]'`)"
    ) from error

from cubepy import config
from cubepy.errors import CubeError, LaunchError
from cubepy.runtime.client import client as make_client
from cubepy.runtime.client import runtimes
from cubepy.runtime.handle import Handle

__all__ = ["custom_op", "client_for"]

_HOST_RUNTIMES = ("interp", "cpu")
_clients: dict[str, Any] = {}


def client_for(device: torch.device) -> Any:
    """The cubepy client that runs launches on tensors of ``device`` (one per runtime and process)."""
    if device.type == "cuda":
        name = "cuda"
    elif device.type == "cpu":
        chosen = str(config.get("CUBEPY_RUNTIME") or "")
        name = chosen if chosen in _HOST_RUNTIMES else ("cpu" if "cpu" in runtimes() else "interp")
    else:
        raise LaunchError(f"cubepy has no runtime for {device.type} tensors (cpu and cuda tensors are supported)")
    found = _clients.get(name)
    if found is None:
        found = _clients[name] = make_client(name)
    return found


def _torch_type(annotation: Any, where: str) -> Any:
    """The PyTorch schema type for a launcher annotation (``cp.Handle`` means a tensor)."""
    if annotation in (Handle, "Handle", "cp.Handle", torch.Tensor, "torch.Tensor"):
        return torch.Tensor
    if annotation in (int, float, bool, str) or annotation in ("int", "float", "bool", "str"):
        return {"int": int, "float": float, "bool": bool, "str": str}.get(annotation, annotation)
    raise CubeError(
        f"{where}: annotate it as cp.Handle (a tensor), int, float, bool or str so PyTorch can type the op "
        f"(got {annotation!r})"
    )


def _return_type(annotation: Any, where: str) -> tuple[Any, int]:
    """The schema's return type and how many tensors it returns (0 for None)."""
    if annotation in (None, type(None), "None"):
        return None, 0
    origin = typing.get_origin(annotation)
    if origin is tuple:
        items = [a for a in typing.get_args(annotation) if a is not Ellipsis]
        for item in items:
            _torch_type(item, where)
        return tuple[tuple(torch.Tensor for _ in items)], len(items)  # type: ignore[misc]
    return _torch_type(annotation, where), 1


def custom_op(
    name: str,
    launcher: Callable[..., Any],
    mutates_args: Sequence[str] | str = (),
    *,
    fake: Callable[..., Any] | None = None,
    device_types: Sequence[str] | str | None = None,
) -> Any:
    """Register ``launcher`` as the PyTorch custom op ``name`` (``"namespace::op"``); returns the op to call.

    ``mutates_args`` names the launcher's tensor parameters it writes (``"unknown"`` as in torch.library).
    ``fake`` computes the outputs' shapes for ``torch.compile`` (default: none for an op returning None, else
    ``torch.empty_like`` of the first tensor argument for each output).
    """
    signature = inspect.signature(launcher)
    try:
        hints = typing.get_type_hints(launcher)
    except Exception:  # annotations naming what the launcher's module cannot resolve: use them as written
        hints = {}
    parameters = list(signature.parameters.values())
    if not parameters:
        raise CubeError(f"custom_op {name}: the launcher must take the cubepy client as its first parameter")
    typed = []
    for parameter in parameters[1:]:
        where = f"custom_op {name}: parameter {parameter.name!r} of {launcher.__qualname__}"
        annotation = hints.get(parameter.name, parameter.annotation)
        if annotation is inspect.Parameter.empty:
            raise CubeError(f"{where} has no annotation: cp.Handle for a tensor, or int, float, bool, str")
        typed.append(parameter.replace(annotation=_torch_type(annotation, where), kind=parameter.POSITIONAL_OR_KEYWORD))
    returned = hints.get("return", signature.return_annotation)
    if returned is inspect.Signature.empty:
        returned = None
    result_type, outputs = _return_type(returned, f"custom_op {name}: the return annotation of {launcher.__qualname__}")
    tensor_positions = [i for i, p in enumerate(typed) if p.annotation is torch.Tensor]
    written = set(_parameters_named(mutates_args, typed))

    def implementation(*args: Any) -> Any:
        tensors = [args[i] for i in tensor_positions]
        device = tensors[0].device if tensors else torch.device("cpu")
        client = client_for(device)
        if device.type == "cuda":
            torch.cuda.current_stream(device).synchronize()
        converted = list(args)
        for i in tensor_positions:
            tensor = args[i]
            if typed[i].name not in written and not tensor.is_contiguous():
                tensor = tensor.contiguous()  # read-only inputs may be copied; written ones must be borrowed
            converted[i] = client.from_dlpack(tensor.detach())
        result = launcher(client, *converted)
        if device.type == "cuda":
            client.sync()
        return _to_torch(result, outputs, name)

    implementation.__signature__ = inspect.Signature(typed, return_annotation=result_type)  # type: ignore[attr-defined]
    implementation.__name__ = launcher.__name__
    implementation.__qualname__ = launcher.__qualname__
    op = torch.library.custom_op(
        name,
        implementation,
        mutates_args="unknown" if mutates_args == "unknown" else tuple(written),
        device_types=device_types,
    )

    def default_fake(*args: Any) -> Any:
        if outputs == 0:
            return None
        first = next((a for a in args if isinstance(a, torch.Tensor)), None)
        if first is None:
            raise CubeError(f"custom_op {name}: pass fake= to say the outputs' shapes (no tensor argument to copy)")
        made = [torch.empty_like(first) for _ in range(outputs)]
        return made[0] if typing.get_origin(result_type) is not tuple else tuple(made)

    op.register_fake(fake if fake is not None else default_fake)
    return op


def _parameters_named(names: Sequence[str] | str, typed: list[inspect.Parameter]) -> list[str]:
    """``mutates_args`` checked against the launcher's tensor parameters (a typo is an error, not a silent race)."""
    if names == "unknown":
        return [p.name for p in typed if p.annotation is torch.Tensor]
    chosen = [names] if isinstance(names, str) else list(names)
    tensors = {p.name for p in typed if p.annotation is torch.Tensor}
    for item in chosen:
        if item not in tensors:
            raise CubeError(
                f"mutates_args names {item!r}, which is not a tensor parameter of the launcher ({sorted(tensors)})"
            )
    return chosen


def _to_torch(result: Any, outputs: int, name: str) -> Any:
    """Handles returned by a launcher as tensors (no copy)."""
    if outputs == 0:
        if result is not None:
            raise CubeError(
                f"custom_op {name}: the launcher returned {type(result).__name__}; its annotation says None"
            )
        return None
    items = result if isinstance(result, tuple) else (result,)
    if len(items) != outputs or not all(isinstance(h, Handle) for h in items):
        raise CubeError(f"custom_op {name}: the launcher must return {outputs} cubepy handle(s), got {result!r}")
    converted = tuple(torch.from_dlpack(_readable(h)) for h in items)
    return converted if isinstance(result, tuple) else converted[0]


def _readable(handle: Handle) -> Any:
    """A handle torch can take without a copy: host and cuda handles both export DLPack themselves."""
    try:
        handle.__dlpack_device__()
    except BufferError as error:
        raise CubeError(f"a launcher returned a handle PyTorch cannot read: {error}") from None
    return handle
