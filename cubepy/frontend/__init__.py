"""cubepy's frontend: ``@cube``, types, containers, builtins and the expansion that builds IR.

| module | responsibility |
|---|---|
| ``function`` | ``@cube``, cube functions and methods (``__expand_<name>`` twins), compiling the rewrite |
| ``rewrite`` | the AST rewrite of control flow and assignments, with per-construct name analysis |
| ``syntax``, ``flow`` | what rewritten code calls: comptime/runtime ``if``/loops/``break``/``return`` |
| ``mutability`` | mutable locals (``into_mut``, assignment, snapshots, weak types, ``Unbound``) |
| ``state`` | ``ExpansionState``, ``ScopeBuilder``, ``KernelBuilder``, the control stack |
| ``values``, ``operations`` | ``ExpandElement`` and the typed construction of instructions |
| ``elem`` | element types (``f32``...), ``Line``, ``Comptime``, literals |
| ``const_table`` | ``const_array``: a numpy table captured from Python, read from constant memory |
| ``containers``, ``sequence``, ``tma`` | ``Array``/``Tensor``/``SharedMemory``/``LocalArray``/``Atomic``, ``Sequence``, ``TensorMap`` |
| ``async_copy`` | ``memcpy_async``, ``async_commit_group``/``async_wait_group``, ``Pipeline`` (PTX ``cp.async``) |
| ``cmma`` | tensor cores: ``Matrix`` fragments, ``fill``, ``load``, ``execute``, ``store``, ``cast`` |
| ``mma`` | tensor cores with per-unit register fragments: ``mma_sync``, ``ldmatrix``, ``stmatrix``, index maps |
| ``wgmma`` | Hopper warpgroup MMA: matrix descriptors, ``wgmma_mma_async``, fence/commit/wait |
| ``builtins``, ``intrinsics`` | positions, sync, plane ops; math, ``select``, ``comptime``/``runtime``/``unroll`` |
| ``random`` | ``randint``/``rand``/``randn``/``randint4x``: Triton's Philox4x32-10 stream as cube functions |
| ``launch``, ``derive``, ``kernel`` | the launch protocol, ``@derive``, the ``Kernel`` object |
| ``identity``, ``source``, ``hooks``, ``testing`` | cache identity, user locations, runtime hooks, ``expand`` |

Layering: imports ``cubepy.ir`` and ``cubepy.errors`` only.
"""

from cubepy.frontend import cmma, hooks
from cubepy.frontend import intrinsics as _intrinsics
from cubepy.frontend.async_copy import Pipeline, async_commit_group, async_wait_group, memcpy_async
from cubepy.frontend.atomics import Atomic, AtomicRef
from cubepy.frontend.barrier import Barrier, BarrierArrayExpand, BarrierExpand
from cubepy.frontend.buffer_launch import Array, BufferCompilationArg, Tensor
from cubepy.frontend.builtins import (
    ABSOLUTE_POS,
    ABSOLUTE_POS_X,
    ABSOLUTE_POS_Y,
    ABSOLUTE_POS_Z,
    CUBE_CLUSTER_DIM,
    CUBE_CLUSTER_DIM_X,
    CUBE_CLUSTER_DIM_Y,
    CUBE_CLUSTER_DIM_Z,
    CUBE_COUNT,
    CUBE_COUNT_X,
    CUBE_COUNT_Y,
    CUBE_COUNT_Z,
    CUBE_DIM,
    CUBE_DIM_X,
    CUBE_DIM_Y,
    CUBE_DIM_Z,
    CUBE_POS,
    CUBE_POS_CLUSTER,
    CUBE_POS_CLUSTER_X,
    CUBE_POS_CLUSTER_Y,
    CUBE_POS_CLUSTER_Z,
    CUBE_POS_X,
    CUBE_POS_Y,
    CUBE_POS_Z,
    LANEMASK_EQ,
    LANEMASK_GE,
    LANEMASK_GT,
    LANEMASK_LE,
    LANEMASK_LT,
    PLANE_DIM,
    PLANE_POS,
    UNIT_POS,
    UNIT_POS_PLANE,
    UNIT_POS_X,
    UNIT_POS_Y,
    UNIT_POS_Z,
    BuiltinVar,
    LaneMask,
    fence,
    fence_proxy_async,
    named_barrier_arrive,
    named_barrier_sync,
    plane_all,
    plane_any,
    plane_ballot,
    plane_broadcast,
    plane_elect,
    plane_exclusive_prod,
    plane_exclusive_sum,
    plane_inclusive_prod,
    plane_inclusive_sum,
    plane_match_all,
    plane_match_any,
    plane_max,
    plane_min,
    plane_prod,
    plane_shuffle,
    plane_shuffle_down,
    plane_shuffle_up,
    plane_shuffle_xor,
    plane_sum,
    setmaxnreg,
    sync_async_proxy_shared,
    sync_cluster,
    sync_cube,
    sync_cube_and,
    sync_cube_count,
    sync_cube_or,
    sync_plane,
)
from cubepy.frontend.const_table import ConstArrayExpand, const_array
from cubepy.frontend.containers import LocalArray, MemoryExpand, SharedMemory, SliceExpand, TensorExpand
from cubepy.frontend.decorator import cube
from cubepy.frontend.derive import CubeLaunch, CubeType, LaunchArg, derive
from cubepy.frontend.elem import (
    Comptime,
    Line,
    ScalarType,
    bf16,
    boolean,
    e4m3,
    e5m2,
    f16,
    f32,
    f64,
    i8,
    i16,
    i32,
    i64,
    u8,
    u16,
    u32,
    u64,
    usize,
)
from cubepy.frontend.function import CubeFunction
from cubepy.frontend.generics import Float, Int, Numeric, TypeVar, UInt
from cubepy.frontend.intrinsics import *  # noqa: F403  (every math function and marker: its __all__)
from cubepy.frontend.kernel import Kernel, ParamSpec
from cubepy.frontend.launch import ScalarCompilationArg
from cubepy.frontend.mma import ldmatrix, mma_fragment, mma_fragment_index, mma_sync, stmatrix
from cubepy.frontend.printing import debug_print
from cubepy.frontend.random import rand, rand4x, randint, randint4x, randn, randn4x
from cubepy.frontend.sequence import Sequence
from cubepy.frontend.state import ExpansionState, KernelBuilder, ScopeBuilder
from cubepy.frontend.tma import (
    TensorMap,
    TensorMapExpand,
    tma_group_commit,
    tma_group_wait,
    tma_group_wait_read,
    tma_store_1d,
    tma_store_2d,
    tma_store_3d,
    tma_store_4d,
    tma_store_5d,
)
from cubepy.frontend.values import ExpandElement
from cubepy.frontend.wgmma import (
    wgmma_a_from_accumulator,
    wgmma_a_position,
    wgmma_accumulator_position,
    wgmma_commit_group,
    wgmma_descriptor,
    wgmma_fence,
    wgmma_mma_async,
    wgmma_store_accumulator,
    wgmma_wait_group,
)

__all__ = [
    # decorators, kernels and protocols
    "cube",
    "CubeFunction",
    "Kernel",
    "ParamSpec",
    "derive",
    "CubeType",
    "CubeLaunch",
    "LaunchArg",
    # types
    "f16",
    "bf16",
    "e4m3",
    "e5m2",
    "f32",
    "f64",
    "i8",
    "i16",
    "i32",
    "i64",
    "u8",
    "u16",
    "u32",
    "u64",
    "boolean",
    "usize",
    "ScalarType",
    "Line",
    "Comptime",
    "TypeVar",
    "Float",
    "Int",
    "UInt",
    "Numeric",
    # containers
    "Array",
    "Tensor",
    "TensorMap",
    "SharedMemory",
    "const_array",
    "ConstArrayExpand",
    "LocalArray",
    "Atomic",
    "Sequence",
    "AtomicRef",
    "MemoryExpand",
    "TensorExpand",
    "SliceExpand",
    "TensorMapExpand",
    "BufferCompilationArg",
    "ScalarCompilationArg",
    # builtins
    "ABSOLUTE_POS",
    "ABSOLUTE_POS_X",
    "ABSOLUTE_POS_Y",
    "ABSOLUTE_POS_Z",
    "UNIT_POS",
    "UNIT_POS_X",
    "UNIT_POS_Y",
    "UNIT_POS_Z",
    "CUBE_POS",
    "CUBE_POS_X",
    "CUBE_POS_Y",
    "CUBE_POS_Z",
    "CUBE_DIM",
    "CUBE_DIM_X",
    "CUBE_DIM_Y",
    "CUBE_DIM_Z",
    "CUBE_COUNT",
    "CUBE_COUNT_X",
    "CUBE_COUNT_Y",
    "CUBE_COUNT_Z",
    "PLANE_DIM",
    "PLANE_POS",
    "UNIT_POS_PLANE",
    "CUBE_POS_CLUSTER",
    "CUBE_POS_CLUSTER_X",
    "CUBE_POS_CLUSTER_Y",
    "CUBE_POS_CLUSTER_Z",
    "CUBE_CLUSTER_DIM",
    "CUBE_CLUSTER_DIM_X",
    "CUBE_CLUSTER_DIM_Y",
    "CUBE_CLUSTER_DIM_Z",
    "BuiltinVar",
    "LANEMASK_EQ",
    "LANEMASK_LT",
    "LANEMASK_LE",
    "LANEMASK_GT",
    "LANEMASK_GE",
    "LaneMask",
    "sync_cube",
    "sync_plane",
    "sync_async_proxy_shared",
    "fence_proxy_async",
    "named_barrier_sync",
    "named_barrier_arrive",
    "sync_cluster",
    "setmaxnreg",
    "sync_cube_count",
    "sync_cube_and",
    "sync_cube_or",
    "fence",
    "plane_sum",
    "plane_prod",
    "plane_min",
    "plane_max",
    "plane_inclusive_sum",
    "plane_exclusive_sum",
    "plane_inclusive_prod",
    "plane_exclusive_prod",
    "plane_all",
    "plane_any",
    "plane_ballot",
    "plane_elect",
    "plane_match_any",
    "plane_match_all",
    "plane_broadcast",
    "plane_shuffle",
    "plane_shuffle_xor",
    "plane_shuffle_up",
    "plane_shuffle_down",
    # TMA and asynchronous barriers
    "Barrier",
    "BarrierArrayExpand",
    "BarrierExpand",
    "tma_store_1d",
    "tma_store_2d",
    "tma_store_3d",
    "tma_store_4d",
    "tma_store_5d",
    "tma_group_commit",
    "tma_group_wait",
    "tma_group_wait_read",
    # asynchronous global-to-shared copies (cp.async)
    "Pipeline",
    "memcpy_async",
    "async_commit_group",
    "async_wait_group",
    # tensor cores (cooperative matrices; per-unit register fragments)
    "cmma",
    "mma_sync",
    "mma_fragment",
    "mma_fragment_index",
    "ldmatrix",
    "stmatrix",
    # math and markers (every public function of ``intrinsics``)
    *_intrinsics.__all__,
    "debug_print",
    # random numbers (Triton's Philox4x32-10 stream)
    "randint",
    "randint4x",
    "rand",
    "rand4x",
    "randn",
    "randn4x",
    # warpgroup MMA (Hopper)
    "wgmma_a_from_accumulator",
    "wgmma_a_position",
    "wgmma_accumulator_position",
    "wgmma_commit_group",
    "wgmma_descriptor",
    "wgmma_fence",
    "wgmma_mma_async",
    "wgmma_store_accumulator",
    "wgmma_wait_group",
    # expansion internals users may need (intrinsic authors, tests)
    "ExpandElement",
    "ExpansionState",
    "KernelBuilder",
    "ScopeBuilder",
    "hooks",
]  # (`testing` is not exported: `cubepy.testing`, the package with the pytest plugin, re-exports it)
