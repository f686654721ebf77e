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
| ``containers``, ``sequence``, ``tma`` | ``Array``/``Tensor``/``SharedMemory``/``LocalArray``/``Atomic``, ``Sequence``, ``TensorMap`` |
| ``cmma`` | tensor cores: ``Matrix`` fragments, ``fill``, ``load``, ``execute``, ``store``, ``cast`` |
| ``builtins``, ``intrinsics`` | positions, sync, plane ops; math, ``select``, ``comptime``/``runtime``/``unroll`` |
| ``launch``, ``derive``, ``kernel`` | the launch protocol, ``@derive``, the ``Kernel`` object |
| ``identity``, ``source``, ``hooks``, ``testing`` | cache identity, user locations, runtime hooks, ``expand`` |

Layering: imports ``cubepy.ir`` and ``cubepy.errors`` only.
"""

from cubepy.frontend import cmma, hooks
from cubepy.frontend import intrinsics as _intrinsics
from cubepy.frontend.barrier import Barrier, BarrierExpand
from cubepy.frontend.builtins import (
    ABSOLUTE_POS,
    ABSOLUTE_POS_X,
    ABSOLUTE_POS_Y,
    ABSOLUTE_POS_Z,
    CUBE_COUNT,
    CUBE_COUNT_X,
    CUBE_COUNT_Y,
    CUBE_COUNT_Z,
    CUBE_DIM,
    CUBE_DIM_X,
    CUBE_DIM_Y,
    CUBE_DIM_Z,
    CUBE_POS,
    CUBE_POS_X,
    CUBE_POS_Y,
    CUBE_POS_Z,
    PLANE_DIM,
    PLANE_POS,
    UNIT_POS,
    UNIT_POS_PLANE,
    UNIT_POS_X,
    UNIT_POS_Y,
    UNIT_POS_Z,
    BuiltinVar,
    plane_all,
    plane_any,
    plane_ballot,
    plane_broadcast,
    plane_elect,
    plane_exclusive_prod,
    plane_exclusive_sum,
    plane_inclusive_prod,
    plane_inclusive_sum,
    plane_max,
    plane_min,
    plane_prod,
    plane_shuffle,
    plane_shuffle_down,
    plane_shuffle_up,
    plane_shuffle_xor,
    plane_sum,
    sync_async_proxy_shared,
    sync_cube,
    sync_plane,
)
from cubepy.frontend.containers import (
    Array,
    Atomic,
    AtomicRef,
    BufferCompilationArg,
    LocalArray,
    MemoryExpand,
    SharedMemory,
    SliceExpand,
    Tensor,
    TensorExpand,
)
from cubepy.frontend.derive import CubeLaunch, CubeType, LaunchArg, derive
from cubepy.frontend.elem import (
    Comptime,
    Line,
    ScalarType,
    bf16,
    boolean,
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
from cubepy.frontend.function import CubeFunction, cube
from cubepy.frontend.intrinsics import *  # noqa: F403  (RECORD_FUNCTIONS: exp, log, ... one per float unary op)
from cubepy.frontend.intrinsics import (
    abs,
    atan2,
    bitcast,
    clamp,
    comptime,
    count_ones,
    div_trunc,
    dot,
    find_first_set,
    fma,
    hypot,
    is_inf,
    is_nan,
    leading_zeros,
    magnitude,
    max,
    min,
    mul_hi,
    normalize,
    powf,
    rem_trunc,
    reverse_bits,
    rhypot,
    runtime,
    select,
    trailing_zeros,
    unroll,
    vector_sum,
)
from cubepy.frontend.kernel import Kernel, ParamSpec
from cubepy.frontend.launch import ScalarCompilationArg
from cubepy.frontend.printing import debug_print
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

__all__ = [
    # decorators, kernels and protocols
    "cube", "CubeFunction", "Kernel", "ParamSpec", "derive", "CubeType", "CubeLaunch", "LaunchArg",
    # types
    "f16", "bf16", "f32", "f64", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "boolean", "usize",
    "ScalarType", "Line", "Comptime",
    # containers
    "Array", "Tensor", "TensorMap", "SharedMemory", "LocalArray", "Atomic", "Sequence", "AtomicRef",
    "MemoryExpand", "TensorExpand", "SliceExpand", "TensorMapExpand", "BufferCompilationArg",
    "ScalarCompilationArg",
    # builtins
    "ABSOLUTE_POS", "ABSOLUTE_POS_X", "ABSOLUTE_POS_Y", "ABSOLUTE_POS_Z", "UNIT_POS", "UNIT_POS_X", "UNIT_POS_Y",
    "UNIT_POS_Z", "CUBE_POS", "CUBE_POS_X", "CUBE_POS_Y", "CUBE_POS_Z", "CUBE_DIM", "CUBE_DIM_X", "CUBE_DIM_Y",
    "CUBE_DIM_Z", "CUBE_COUNT", "CUBE_COUNT_X", "CUBE_COUNT_Y", "CUBE_COUNT_Z", "PLANE_DIM", "PLANE_POS",
    "UNIT_POS_PLANE", "BuiltinVar",
    "sync_cube", "sync_plane", "sync_async_proxy_shared",
    "plane_sum", "plane_prod", "plane_min", "plane_max", "plane_inclusive_sum", "plane_exclusive_sum",
    "plane_inclusive_prod", "plane_exclusive_prod", "plane_all", "plane_any", "plane_ballot", "plane_elect",
    "plane_broadcast", "plane_shuffle", "plane_shuffle_xor", "plane_shuffle_up", "plane_shuffle_down",
    # TMA and asynchronous barriers
    "Barrier", "BarrierExpand", "tma_store_1d", "tma_store_2d", "tma_store_3d", "tma_store_4d", "tma_store_5d",
    "tma_group_commit", "tma_group_wait", "tma_group_wait_read",
    # tensor cores (cooperative matrices)
    "cmma",
    # math and markers
    *_intrinsics.RECORD_FUNCTIONS, "abs", "powf", "min", "max", "clamp", "fma", "select", "is_nan", "is_inf", "bitcast",
    "div_trunc", "rem_trunc", "comptime", "runtime", "unroll", "debug_print",
    "atan2", "hypot", "rhypot", "count_ones", "reverse_bits", "leading_zeros", "trailing_zeros",
    "find_first_set", "mul_hi", "vector_sum", "dot", "magnitude", "normalize",
    # expansion internals users may need (intrinsic authors, tests)
    "ExpandElement", "ExpansionState", "KernelBuilder", "ScopeBuilder", "hooks",
]  # (`testing` is not exported: `cubepy.testing`, the package with the pytest plugin, re-exports it)
