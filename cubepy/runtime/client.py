"""Compute clients: buffers, the kernel cache and launch, for each runtime."""

from __future__ import annotations

import math
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import numpy as np

from cubepy import config
from cubepy.errors import CubeError, LaunchError
from cubepy.forks import fork_safe
from cubepy.ir.kernel import launch_shape_problem
from cubepy.runtime import cache
from cubepy.runtime.args import CubeCount, CubeDim
from cubepy.runtime.backend import Backend
from cubepy.runtime.bindings import Bindings, BufferBinding
from cubepy.runtime.handle import Handle, contiguous_strides

# A kernel (``@cube.kernel``) or a kernel-like object with the same duck-typed methods (tests make some).
KernelLike = Any
_Shape = TypeVar("_Shape", CubeCount, CubeDim)

_STORAGE_ALIGN = 256


def as_numpy_dtype(dtype: Any) -> np.dtype:
    """A numpy dtype from a numpy dtype, a numpy type or a cubepy element type (``cp.f32``)."""
    numpy = getattr(dtype, "numpy", None)
    return cast(np.dtype, np.dtype(numpy if numpy is not None else dtype))


def _aligned_empty(count: int, dtype: np.dtype, allocate: Callable[..., np.ndarray] = np.empty) -> np.ndarray:
    """A 1-D array whose first byte is 256-byte aligned (TMA needs 16, swizzles up to 1024 by address);
    ``allocate=np.zeros`` gives zeros (the C library's zeroed pages, no second pass over the memory)."""
    nbytes = max(count, 1) * dtype.itemsize
    raw = allocate(nbytes + _STORAGE_ALIGN, np.uint8)
    start = (-raw.ctypes.data) % _STORAGE_ALIGN
    return raw[start : start + nbytes].view(dtype)[:count]


# The warm launch reads a knob only when it is overridden or present in the environment: a dict lookup of a
# pre-encoded key (``config.environ_key``) in os.environ's own storage, instead of two os.environ.get calls.
_ENVIRON = config.ENVIRON
_DEBUG_KEY = ("CUBEPY_DEBUG", config.environ_key("CUBEPY_DEBUG"))
_SANITIZE_KEY = ("CUBEPY_SANITIZE", config.environ_key("CUBEPY_SANITIZE"))
_CONTRACT_KEY = ("CUBEPY_CONTRACT", config.environ_key("CUBEPY_CONTRACT"))
_FASTMATH_KEY = ("CUBEPY_FASTMATH", config.environ_key("CUBEPY_FASTMATH"))


def _contracts(kernel: KernelLike) -> bool:
    """Whether launches of ``kernel`` fuse ``a * b + c``: its decorator's choice, else ``CUBEPY_CONTRACT`` (on)."""
    choice = kernel.contract
    if choice is not None:
        return cast(bool, choice)
    return bool(config.get("CUBEPY_CONTRACT")) if _knob_set(_CONTRACT_KEY) else True


def _fastmath(kernel: KernelLike) -> bool:
    """Whether launches of ``kernel`` may approximate f32 math: its decorator's choice, else ``CUBEPY_FASTMATH`` (off)."""
    choice = getattr(kernel, "fastmath", None)  # kernel-like objects without the attribute follow the setting
    if choice is not None:
        return bool(choice)
    return bool(config.get("CUBEPY_FASTMATH")) if _knob_set(_FASTMATH_KEY) else False


def _knob_set(key: tuple[str, object]) -> bool:
    """Whether knob ``key`` may differ from its default (overridden, or set in the environment)."""
    if config._overrides:
        return key[0] in config._overrides or key[1] in _ENVIRON
    return key[1] in _ENVIRON


WARM_LAUNCHES_KEPT = 512  # remembered warm launches per client (all forgotten when full)


class _WarmLaunch:
    """What a launch decided for one launch signature: its artifact, the buffer arguments' handles it was made
    for (weakly: a dead handle's ``id`` may come back with other metadata), the scalar arguments' conversions
    and the back end's memo for those buffers."""

    __slots__ = ("artifact", "handles", "scalars", "memo", "check")

    def __init__(
        self,
        artifact: object,
        handles: tuple[tuple[int, weakref.ref[Any]], ...],
        scalars: tuple[tuple[int, Callable[[Any], Any]], ...],
        check: Callable[[tuple[Any, ...], int], bool] | None = None,
    ) -> None:
        self.artifact = artifact
        self.handles = handles
        # whether the facts the launch found that its signature does not determine still hold
        # (``Kernel.warm_check``; None when there are none)
        self.check = check
        self.scalars = scalars
        self.memo: dict[object, object] = {}

    def matches(self, args: tuple[Any, ...], cubes: int) -> bool:
        """Whether ``args`` hold the very handles this entry was made for, and the facts its kernel was compiled
        with that a signature does not determine still hold for ``args`` and ``cubes`` cubes."""
        for index, handle in self.handles:
            if handle() is not args[index].handle:
                return False
        check = self.check
        return True if check is None else check(args, cubes)


def _no_check(comp_args: tuple[Any, ...]) -> None:
    """What a kernel-like object without ``warm_check`` asks a warm launch to re-check: nothing."""
    return None


def _no_signature(args: tuple[Any, ...]) -> None:
    """The launch signature of a kernel-like object without one: none (every launch takes the full path)."""
    return None


def _as_cube_shape(value: object, cls: type[_Shape], what: str) -> _Shape:
    if isinstance(value, cls):
        return value
    if isinstance(value, int):
        return cls(value)
    if isinstance(value, (tuple, list)):
        problem = launch_shape_problem(what, tuple(value), cls.MAXIMUM, cls.MINIMUM)
        if problem is not None:
            raise LaunchError(problem)
        return cls(*value)
    raise LaunchError(f"{what}: expected {cls.__name__}, an int or a tuple, got {type(value).__name__}")


class ComputeClient:
    """A runtime's entry point: allocate, read and launch (see docs/reference/cubepy.md)."""

    def __init__(self, name: str, backend: Backend, *, sanitize: bool = False) -> None:
        self.name = name
        self.backend = backend
        self.sanitize = sanitize
        self._cache: dict[tuple[Any, ...], object] = {}
        self._lock = fork_safe(threading.Lock())  # a child forked mid-build must not wait on it
        self.stats = {"hits": 0, "misses": 0}
        # What warm launches decided (artifact, handles by weak reference), by kernel, cube_dim, mode, knobs and
        # the arguments' launch signature: a launch that finds its entry skips the compilation arguments.
        self._warm: dict[tuple[Any, ...], _WarmLaunch] = {}
        self.schedule: object | None = None  # the interp's Schedule when the client names one

    # -- buffers ---------------------------------------------------------------------------
    def create(self, array: object) -> Handle:
        """A new buffer holding a copy of ``array`` (keeps its dtype and shape): numpy, a list, or any DLPack exporter."""
        if not isinstance(array, np.ndarray) and hasattr(array, "__dlpack__"):
            array = _host_view(array, "client.create", self.name, writable=False)
        array = np.asarray(array)
        storage = _aligned_empty(array.size, array.dtype)
        storage[...] = array.reshape(-1)
        return Handle(self, storage, array.dtype, array.shape)

    def from_dlpack(self, obj: object) -> Handle:
        """A handle on ``obj``'s host memory without a copy (any ``__dlpack__`` exporter): kernels write ``obj``.

        The handle keeps ``obj`` alive.  Refused, naming the property: memory on another device, read-only
        memory, layouts other than C-contiguous, element types cubepy has no name for.
        """
        array = _host_view(obj, "from_dlpack", self.name, writable=True)
        return Handle(self, array.reshape(-1), array.dtype, array.shape)

    def empty(self, shape: int | Iterable[int], dtype: object) -> Handle:
        """A new buffer of ``shape`` and ``dtype`` with unspecified contents."""
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        dtype = as_numpy_dtype(dtype)
        storage = _aligned_empty(math.prod(shape), dtype)
        # Filled with a recognisable garbage pattern so reads of never-written data stand out.
        storage.view(np.uint8)[...] = 0xCD
        return Handle(self, storage, dtype, shape)

    def zeros(self, shape: int | Iterable[int], dtype: object) -> Handle:
        """A new buffer of ``shape`` and ``dtype`` filled with zeros."""
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        dtype = as_numpy_dtype(dtype)
        return Handle(self, _aligned_empty(math.prod(shape), dtype, np.zeros), dtype, shape)

    def read(self, handle: Handle) -> np.ndarray:
        """A numpy copy of the buffer, in its shape (and strides, for strided views)."""
        if type(handle) is not Handle or handle.client is not self:
            self._own(handle, "read")
        shape, offset = handle.shape, handle.offset
        if handle.strides == contiguous_strides(shape):
            return cast(np.ndarray, handle.storage[offset : offset + math.prod(shape)].reshape(shape).copy())
        flat = handle.storage[offset:]
        item = flat.itemsize
        view = np.lib.stride_tricks.as_strided(flat, handle.shape, tuple(s * item for s in handle.strides))
        return cast(np.ndarray, view.copy())

    def sync(self) -> None:
        """Wait for every launch to finish (CPU launches finish before they return)."""

    def _own(self, handle: object, what: str) -> None:
        if not isinstance(handle, Handle):
            raise LaunchError(f"client.{what}: expected a Handle, got {type(handle).__name__}")
        if handle.client is not self:
            raise LaunchError(f"client.{what}: the handle belongs to another client ({handle.client!r})")

    # -- kernels ---------------------------------------------------------------------------
    def compiled(
        self, kernel: KernelLike, cube_dim: tuple[int, int, int], checked: bool, comp_args: tuple[object, ...]
    ) -> object:
        """The cached back-end artifact for one specialization, built on a miss."""
        key = (kernel.identity, cube_dim, checked, comp_args, _contracts(kernel), _fastmath(kernel))
        artifact = self._cache.get(key)
        if artifact is not None:
            self.stats["hits"] += 1
            if _knob_set(_DEBUG_KEY) and config.get("CUBEPY_DEBUG") >= 1:
                print(f"[cubepy] cache hit {kernel.name} cube_dim={cube_dim}", file=sys.stderr)
            return artifact
        return self._build(kernel, key)

    def _build(self, kernel: KernelLike, key: tuple[Any, ...]) -> object:
        """A miss of the in-memory cache: the on-disk cache, else expand and prepare (then store on disk)."""
        identity, cube_dim, checked, comp_args, contract, fastmath = key
        with self._lock:
            artifact = self._cache.get(key)
            if artifact is not None:
                self.stats["hits"] += 1
                return artifact
            start = time.perf_counter()
            disk = self._disk(identity, cube_dim, checked, comp_args, contract, fastmath)
            disk_key, source = None, "compiled"
            if disk is not None:
                disk_key = disk[1]
                artifact = disk[0].load(disk_key)
                source = "loaded from disk"
            if artifact is None:
                source = "compiled"
                # fastmath is passed only when on: kernel-like objects without the keyword keep working
                options = {"fastmath": True} if fastmath else {}
                definition = kernel.define(comp_args, cube_dim, checked, contract, **options)
                if self.backend.name != "interp" and hasattr(kernel, "notice_build"):
                    kernel.notice_build(definition, f"LLVM's O3 for the {self.backend.name} runtime starts now")
                artifact = self.backend.prepare(definition)
                if disk is not None:
                    disk[0].store(cast(str, disk_key), artifact)
            self._cache[key] = artifact
            self.stats["misses"] += 1
            if config.get("CUBEPY_DEBUG") >= 1:
                took = (time.perf_counter() - start) * 1e3
                print(f"[cubepy] {source} {kernel.name} cube_dim={cube_dim} in {took:.1f} ms", file=sys.stderr)
        return artifact

    def _disk(
        self,
        identity: str,
        cube_dim: tuple[int, int, int],
        checked: bool,
        comp_args: tuple[object, ...],
        contract: bool = True,
        fastmath: bool = False,
    ) -> tuple[cache.DiskCache, str] | None:
        """(on-disk cache, key) for this specialization, or None (back end not cacheable, cache off, unstable key)."""
        kind = self.backend.disk_cache_kind
        if kind is None:
            return None
        store = cache.for_kind(kind)
        if store is None:
            return None
        target = self.backend.disk_cache_target
        key = cache.entry_key(kind, target, identity, cube_dim, checked, comp_args, contract, fastmath)
        return None if key is None else (store, key)

    def launch(
        self, kernel: KernelLike, cube_count: object, cube_dim: object, args: tuple[Any, ...], *, checked: bool = True
    ) -> None:
        """Launch ``kernel`` over ``cube_count`` cubes of ``cube_dim`` units with ``args``."""
        # The warm path: no attrs objects, no environment reads unless a knob is set, one dict lookup.
        count = cube_count if type(cube_count) is CubeCount else _as_cube_shape(cube_count, CubeCount, "cube_count")
        dim = cube_dim if type(cube_dim) is CubeDim else _as_cube_shape(cube_dim, CubeDim, "cube_dim")
        signature = getattr(kernel, "launch_signature", _no_signature)(args)
        warm_key = None
        if signature is not None:
            warm_key = (kernel, dim.x, dim.y, dim.z, checked, _contracts(kernel), _fastmath(kernel), signature)
            try:
                warm = self._warm.get(warm_key)
            except TypeError:  # an unhashable comptime value or shape: the full path names it
                warm = warm_key = None
            if warm is not None and warm.matches(args, count.x * count.y * count.z):
                # what ``kernel.register`` binds, without its checks: the signature matched a checked launch
                bindings = Bindings(
                    [
                        BufferBinding(args[i].handle, args[i].line_size, args[i].shape, args[i].strides)
                        for i, _ in warm.handles
                    ],
                    [to_numpy(args[i]) for i, to_numpy in warm.scalars],
                    memo=warm.memo,
                )
                self.stats["hits"] += 1
                if _knob_set(_DEBUG_KEY) and config.get("CUBEPY_DEBUG") >= 1:
                    print(f"[cubepy] cache hit {kernel.name} cube_dim={(dim.x, dim.y, dim.z)}", file=sys.stderr)
                self._run(warm.artifact, count, bindings)
                return
        comp_args = kernel.compilation_args(args, count.x * count.y * count.z)
        bindings = Bindings()
        kernel.register(args, bindings)
        for binding in bindings.buffers:
            handle = binding.handle
            if type(handle) is not Handle or handle.client is not self:
                self._own(handle, f"launch of {kernel.name}")
        dims = (dim.x, dim.y, dim.z)
        key = (kernel.identity, dims, checked, comp_args, _contracts(kernel), _fastmath(kernel))
        artifact = self._cache.get(key)
        if artifact is None:
            artifact = self._build(kernel, key)
        else:
            self.stats["hits"] += 1
            if _knob_set(_DEBUG_KEY) and config.get("CUBEPY_DEBUG") >= 1:
                print(f"[cubepy] cache hit {kernel.name} cube_dim={dims}", file=sys.stderr)
        if warm_key is not None:
            bindings.memo = self._remember(warm_key, artifact, kernel, args, comp_args)
        self._run(artifact, count, bindings)

    def _remember(
        self,
        warm_key: tuple[Any, ...],
        artifact: object,
        kernel: KernelLike,
        args: tuple[Any, ...],
        comp_args: tuple[Any, ...],
    ) -> dict[object, object] | None:
        """Keep what this launch decided under ``warm_key``; its memo dict (None where a handle has no weak
        reference: then nothing is kept)."""
        try:
            handles = tuple((index, weakref.ref(args[index].handle)) for index in kernel.buffer_params)
        except TypeError:
            return None
        if len(self._warm) >= WARM_LAUNCHES_KEPT:
            self._warm.clear()
        check = getattr(kernel, "warm_check", _no_check)(comp_args)
        warm = self._warm[warm_key] = _WarmLaunch(artifact, handles, kernel.scalar_conversions(), check)
        return warm.memo

    def _run(self, artifact: object, count: CubeCount, bindings: Bindings) -> None:
        counts = (count.x, count.y, count.z)
        backend = self.backend
        backend.check_launch(artifact, counts)
        if counts[0] == 0 or counts[1] == 0 or counts[2] == 0:
            return
        # CUBEPY_SANITIZE is a CPU-runtime setting: it never turns a GPU client's launches into errors.
        sanitize = self.sanitize or (
            backend.name == "interp" and _knob_set(_SANITIZE_KEY) and bool(config.get("CUBEPY_SANITIZE"))
        )
        if count.cluster is None:
            backend.run(artifact, counts, bindings, sanitize=sanitize)
        else:
            backend.run(artifact, counts, bindings, sanitize=sanitize, cluster=count.cluster.as_tuple())

    def __repr__(self) -> str:
        return f"ComputeClient({self.name!r})"


def _host_view(obj: object, what: str, runtime: str, *, writable: bool) -> np.ndarray:
    """A numpy array over ``obj``'s memory (DLPack, no copy), refused clearly where a host runtime cannot use it."""
    from cubepy.runtime import dlpack

    view = dlpack.from_dlpack(obj, what=what)
    if view.device_type not in dlpack.HOST_DEVICE_TYPES:
        raise LaunchError(
            f"{what}: the {type(obj).__name__} is on {view.device_name}; the {runtime} runtime addresses host "
            "memory only (move it to the CPU first, e.g. tensor.cpu(), or use cp.client('cuda'))"
        )
    if writable and view.read_only:
        raise LaunchError(
            f"{what}: the {type(obj).__name__} is read-only (its DLPack export says so); a borrowed handle may be "
            "written by kernels: copy it with client.create(obj) instead"
        )
    if writable and view.strides != contiguous_strides(view.shape) and view.span:
        raise LaunchError(
            f"{what}: the {type(obj).__name__} of shape {view.shape} has strides {view.strides} (elements), not "
            "C-contiguous; borrow a contiguous copy (e.g. tensor.contiguous()) or copy it with client.create(obj)"
        )
    array = dlpack.host_array(view)
    if view.strides == contiguous_strides(view.shape):
        return array[: int(np.prod(view.shape))].reshape(view.shape) if view.shape else array[:1].reshape(())
    item = view.dtype.itemsize
    return np.lib.stride_tricks.as_strided(array, view.shape, tuple(s * item for s in view.strides), writeable=False)


def _interp_client(sanitize: bool, schedule: str | None = None, seed: int | None = None) -> ComputeClient:
    from cubepy.runtime.interp.backend import InterpBackend  # the handlers load on first use, not at import
    from cubepy.runtime.interp.schedule import Schedule

    chosen = None if schedule is None else Schedule(schedule, 0 if seed is None else seed)
    made = ComputeClient("interp", InterpBackend(chosen), sanitize=sanitize)
    made.schedule = chosen
    return made


def _cpu_unavailable_reason() -> str | None:
    from cubepy.runtime import cpu

    return cpu.host_unavailable_reason()


def _cpu_client(sanitize: bool) -> ComputeClient:
    from cubepy.runtime import cpu

    return cpu.make_client(sanitize=sanitize)


def _cuda_unavailable_reason() -> str | None:
    from cubepy.runtime import cuda

    return cuda.unavailable_reason()


def _cuda_client(sanitize: bool) -> ComputeClient:
    from cubepy.runtime import cuda

    return cuda.make_client(sanitize=sanitize)


@dataclass(frozen=True)
class Runtime:
    """One runtime ``cp.client(name)`` can make: why it cannot run here (None: it can), and its factory."""

    unavailable_reason: Callable[[], str | None]
    make_client: Callable[[bool], ComputeClient]


# Runtime name -> Runtime, in the order ``runtimes()`` lists them.  A new runtime is one entry here.
RUNTIMES: dict[str, Runtime] = {
    "interp": Runtime(lambda: None, _interp_client),
    "cuda": Runtime(_cuda_unavailable_reason, _cuda_client),
    "cpu": Runtime(_cpu_unavailable_reason, _cpu_client),
}

_clients: dict[tuple[str, bool, str | None, int | None], ComputeClient] = {}


def runtimes() -> list[str]:
    """Names of the runtimes usable here: ``interp`` always, ``cuda`` with a GPU and driver, ``cpu`` where
    llvmlite targets this machine."""
    return [name for name, runtime in RUNTIMES.items() if runtime.unavailable_reason() is None]


def unavailable_reason(name: str) -> str | None:
    """Why runtime ``name`` cannot be used here, or None when it can."""
    runtime = RUNTIMES.get(name)
    if runtime is None:
        return f"unknown runtime {name!r}; known: {', '.join(RUNTIMES)}"
    return runtime.unavailable_reason()


def client(
    name: str | None = None, *, sanitize: bool = False, schedule: str | None = None, seed: int | None = None
) -> ComputeClient:
    """The client of runtime ``name`` (default: ``CUBEPY_RUNTIME``, else ``interp``).

    ``schedule`` (interp only): how planes interleave and TMA copies land, ``"lockstep"``, ``"random"``
    (drawn from ``seed``; the other schedules ignore it) or ``"adversarial"``; None follows
    ``CUBEPY_SCHEDULE`` (see docs/runtime/schedules.md).
    """
    name = name or config.get("CUBEPY_RUNTIME")
    if schedule != "random":
        seed = None  # only the random schedule draws; the others ignore it (the API's default is seed=0)
    key = (name, sanitize, schedule, seed)
    existing = _clients.get(key)
    if existing is not None:
        return existing
    runtime = RUNTIMES.get(name)
    if runtime is None:
        raise CubeError(f"unknown runtime {name!r}; available: {', '.join(runtimes())}")
    if schedule is not None and name != "interp":
        raise CubeError(f"schedule={schedule!r}: only the interp runtime has schedules, not {name!r}")
    reason = runtime.unavailable_reason()
    if reason is not None:
        raise CubeError(f"runtime {name!r} is unavailable: {reason}")
    made = _interp_client(sanitize, schedule, seed) if schedule is not None else runtime.make_client(sanitize)
    _clients[key] = made
    return made
