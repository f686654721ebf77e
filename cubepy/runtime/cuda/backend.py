"""The cuda back end of ``ComputeClient``: compile and load kernels, check launches, pack and launch.

``prepare`` compiles a ``KernelDefinition`` for the device (``sm_90a`` on Hopper), loads the cubin (or
has the driver JIT the PTX when there is no cubin, or the cubin is refused) and reads the function's
limits.  ``run`` binds the arguments per the kernel ABI (``cubepy.compiler.abi``): buffer addresses,
scalar bytes, tensor maps encoded for the buffers' addresses, and the u32 metadata words (lengths,
shapes, strides), all in the one parameter block the launch copies: nothing is uploaded per launch.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from cubepy.compiler.abi import param_layout
from cubepy.errors import CubeError, LaunchError
from cubepy.ir import MAX_CUBE_DIM, KernelDefinition, launch_shape_problem
from cubepy.runtime import params as kparams
from cubepy.runtime.bindings import Bindings
from cubepy.runtime.cuda import tensormaps
from cubepy.runtime.cuda.device import CudaDevice, DeviceBuffer
from cubepy.runtime.cuda.driver import check, error_name

if TYPE_CHECKING:
    from cubepy.runtime.handle import Handle

SANITIZER_UNAVAILABLE = (
    "the sanitizer is a CPU-runtime feature: use cp.client('interp', sanitize=True) "
    "(and unset CUBEPY_SANITIZE for the cuda runtime)"
)
# Load errors after which the PTX is worth handing to the driver's JIT instead of the cubin.
_RETRY_WITH_PTX = frozenset(
    {
        "CUDA_ERROR_NO_BINARY_FOR_GPU",
        "CUDA_ERROR_INVALID_IMAGE",
        "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
        "CUDA_ERROR_INVALID_SOURCE",
    }
)
_JIT_LOG_BYTES = 16384
_STATIC_SHARED_LIMIT = 48 * 1024  # above this a kernel must opt in, for dynamic shared memory only


@dataclass
class CudaKernel:
    """A loaded kernel: what ``prepare`` returns and ``check_launch``/``run`` take."""

    definition: KernelDefinition
    compiled: Any  # cubepy.compiler.compiled.CompiledKernel
    module: Any  # CUmodule
    function: Any  # CUfunction
    packer: kparams.ParamPacker  # the parameter layout and its byte format, worked out once
    loaded_from: str  # "cubin" or "ptx" (driver JIT)
    static_shared_bytes: int
    dynamic_shared_bytes: int
    max_units_per_cube: int  # the function's limit, lower than the device's when registers run out
    registers: int

    @property
    def name(self) -> str:
        """The PTX entry name."""
        return cast(str, self.compiled.name)


class CudaBackend:
    """Kernels on one CUDA device: the cuda runtime's ``Backend`` (``cubepy.runtime.backend``)."""

    name = "cuda"
    disk_cache_kind: str | None = None  # loaded modules live in the CUDA context, not on disk
    disk_cache_target = "cuda"

    def __init__(self, device: CudaDevice, compile_fn: Callable[..., Any] | None = None) -> None:
        self.device = device
        self._compile_fn = compile_fn

    # -- prepare ---------------------------------------------------------------------------
    def prepare(self, definition: KernelDefinition) -> CudaKernel:
        """Compile for this device and load the result: a ``CudaKernel`` ready to launch."""
        compile_fn = self._compile_fn
        if compile_fn is None:
            from cubepy.compiler.compiled import compile_definition
            from cubepy.runtime.cache import libdevice_cache_dir

            compile_fn = functools.partial(compile_definition, libdevice_cache=libdevice_cache_dir())
        compiled = compile_fn(definition, self.device.info.target, assemble=True)
        final = getattr(compiled, "definition", None) or definition
        module, loaded_from = self._load(compiled)
        drv = self.device.driver
        function = check(
            drv,
            drv.cuModuleGetFunction(module, compiled.name.encode()),
            "cuModuleGetFunction",
            f"entry {compiled.name!r}",
        )
        dynamic = int(getattr(compiled, "dynamic_shared_bytes", 0) or 0)
        static = self._function_attribute(function, "SHARED_SIZE_BYTES")
        if dynamic and _STATIC_SHARED_LIMIT < static + dynamic <= self.device.info.max_shared_per_block_optin:
            # Past 48 KiB a kernel gets shared memory only by opting in, per function, for dynamic memory
            # (more than the device's opt-in maximum is left to check_launch, which says so as a LaunchError).
            attr = drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            check(
                drv,
                drv.cuFuncSetAttribute(function, attr, dynamic),
                "cuFuncSetAttribute",
                f"MAX_DYNAMIC_SHARED_SIZE_BYTES = {dynamic} for kernel {compiled.name}",
            )
        return CudaKernel(
            definition=final,
            compiled=compiled,
            module=module,
            function=function,
            packer=kparams.ParamPacker(param_layout(final)),
            loaded_from=loaded_from,
            static_shared_bytes=static,
            dynamic_shared_bytes=dynamic,
            max_units_per_cube=self._function_attribute(function, "MAX_THREADS_PER_BLOCK"),
            registers=self._function_attribute(function, "NUM_REGS"),
        )

    def _load(self, compiled: Any) -> tuple[Any, str]:
        """Load the cubin; without one, or when the driver refuses it, JIT the PTX."""
        drv = self.device.driver
        self.device.make_current()
        cubin = getattr(compiled, "cubin", None)
        if cubin:
            result = drv.cuModuleLoadData(bytes(cubin))
            if int(result[0]) == 0:
                return result[1], "cubin"
            if error_name(drv, result[0]) not in _RETRY_WITH_PTX:
                check(drv, result, "cuModuleLoadData", f"cubin of kernel {compiled.name} ({compiled.target})")
        return self._load_ptx(compiled), "ptx"

    def _load_ptx(self, compiled: Any) -> Any:
        drv = self.device.driver
        image = compiled.ptx.encode() + b"\0"  # the driver reads PTX as a NUL-terminated string
        log = bytearray(_JIT_LOG_BYTES)
        options = [drv.CUjit_option.CU_JIT_ERROR_LOG_BUFFER, drv.CUjit_option.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES]
        result = drv.cuModuleLoadDataEx(image, len(options), options, [log, len(log)])
        if int(result[0]) != 0:
            text = bytes(log).split(b"\0")[0].decode(errors="replace").strip()
            check(
                drv,
                result,
                "cuModuleLoadDataEx (PTX JIT)",
                f"kernel {compiled.name} for {compiled.target}; JIT log:\n{text or '(empty)'}",
            )
        return result[1]

    def _function_attribute(self, function: Any, name: str) -> int:
        drv = self.device.driver
        attr = getattr(drv.CUfunction_attribute, f"CU_FUNC_ATTRIBUTE_{name}")
        return int(check(drv, drv.cuFuncGetAttribute(attr, function), f"cuFuncGetAttribute({name})"))

    # -- check_launch ----------------------------------------------------------------------
    def check_launch(self, kernel: CudaKernel, cube_count: tuple[int, int, int]) -> None:
        """Reject launches the device would refuse, before anything is queued (LaunchError)."""
        check_launch_limits(kernel, cube_count, self.device.info)

    # -- run -------------------------------------------------------------------------------
    def run(
        self,
        kernel: CudaKernel,
        cube_count: tuple[int, int, int],
        bindings: Bindings,
        *,
        sanitize: bool,
        cluster: tuple[int, int, int] = (1, 1, 1),
    ) -> None:
        """Bind and launch on the stream, every length, shape and stride by value (asynchronous; faults surface at sync).

        A cluster launch goes through ``cuLaunchKernelEx`` with the cluster-dimension attribute."""
        if sanitize:
            raise CubeError(SANITIZER_UNAVAILABLE)
        drv = self.device.driver
        # Everything that can fail on the host happens before anything is queued: a refused launch writes nothing.
        metadata = kernel.packer.metadata(bindings.buffers, kernel.name)
        addresses = [buffer_address(binding.handle) for binding in bindings.buffers]
        maps = [tensormaps.encode(arg, allocation_address(arg.handle), drv) for arg in bindings.tensor_maps]
        packed = kernel.packer.pack(addresses, bindings.scalars, maps, metadata)
        grid = tuple(int(c) for c in cube_count)
        block = tuple(int(d) for d in kernel.definition.cube_dim)
        self.device.make_current()
        if cluster != (1, 1, 1):
            config = cluster_launch_config(drv, grid, block, cluster, kernel.dynamic_shared_bytes, self.device.stream)
            check(
                drv,
                drv.cuLaunchKernelEx(config, kernel.function, packed.address, 0),
                "cuLaunchKernelEx",
                f"kernel {kernel.name}, cube_count={grid}, cube_dim={block}, cluster={cluster}",
            )
            return
        check(
            drv,
            drv.cuLaunchKernel(
                kernel.function, *grid, *block, kernel.dynamic_shared_bytes, self.device.stream, packed.address, 0
            ),
            "cuLaunchKernel",
            f"kernel {kernel.name}, cube_count={grid}, cube_dim={block}",
        )


def cluster_launch_config(
    drv: Any, grid: tuple[int, ...], block: tuple[int, ...], cluster: tuple[int, int, int], shared: int, stream: Any
) -> Any:
    """A ``CUlaunchConfig`` for ``cuLaunchKernelEx`` with ``CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION`` set."""
    attribute = drv.CUlaunchAttribute()
    attribute.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    attribute.value.clusterDim.x, attribute.value.clusterDim.y, attribute.value.clusterDim.z = cluster
    config = drv.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = grid
    config.blockDimX, config.blockDimY, config.blockDimZ = block
    config.sharedMemBytes = shared
    config.hStream = stream
    config.attrs = [attribute]
    config.numAttrs = 1
    return config


def check_launch_limits(kernel: CudaKernel, cube_count: tuple[int, int, int], info: Any) -> None:
    """The launch checks, on plain data: grid size, units per cube, shared memory."""
    for axis, count, limit in zip("xyz", cube_count, info.max_grid):
        if count > limit:
            raise LaunchError(
                f"kernel {kernel.name}: cube_count.{axis} = {count} exceeds the device's limit of {limit}"
            )
    problem = launch_shape_problem(
        f"kernel {kernel.name}: cube_dim", tuple(kernel.definition.cube_dim), MAX_CUBE_DIM, 1
    )
    if problem is not None:
        raise LaunchError(problem)
    units = int(np.prod(kernel.definition.cube_dim))
    if units > kernel.max_units_per_cube:
        raise LaunchError(
            f"kernel {kernel.name}: cube_dim {kernel.definition.cube_dim} has {units} units but the "
            f"compiled kernel allows at most {kernel.max_units_per_cube} per cube "
            f"({kernel.registers} registers per unit)"
        )
    shared = kernel.static_shared_bytes + kernel.dynamic_shared_bytes
    if shared > info.max_shared_per_block_optin:
        raise LaunchError(
            f"kernel {kernel.name} needs {shared} bytes of shared memory; a cube has at most "
            f"{info.max_shared_per_block_optin} on {info.name}"
        )


def allocation_address(handle: Handle) -> int:
    """The device address where a handle's allocation starts (tensor maps add the offset themselves)."""
    storage = handle.storage
    if not isinstance(storage, DeviceBuffer):
        raise LaunchError(f"{handle!r} does not live in device memory (was it made by another client?)")
    return storage.ptr


def buffer_address(handle: Handle) -> int:
    """The device address of a handle's element 0 (its allocation plus its offset)."""
    return allocation_address(handle) + handle.offset * handle.dtype.itemsize
