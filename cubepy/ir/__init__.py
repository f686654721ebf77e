"""cubepy's IR: pure data, a verifier and one printer; it imports nothing else of cubepy but errors.

Read this package to learn the whole IR: ``types`` (element and item types), ``variable`` (variables
and source locations), ``ops`` (operations, one module per family; ``ops.branch`` holds structured
control flow), ``scope`` (instructions and scopes), ``kernel`` (``KernelDefinition``), ``printer``
(the stable text form) and ``verifier``.
"""

from cubepy.ir import ops
from cubepy.ir.kernel import (
    MAX_CONST_BYTES,
    MAX_CUBE_COUNT,
    MAX_CUBE_DIM,
    MAX_UNITS_PER_CUBE,
    ConstTable,
    KernelDefinition,
    Param,
    ProductFactor,
    const_table,
    launch_shape_problem,
)
from cubepy.ir.ops import branch
from cubepy.ir.printer import format_instruction, format_kernel, format_scope, format_variable
from cubepy.ir.scope import Instruction, Scope, child_scopes, walk
from cubepy.ir.types import (
    ALL_ELEM_TYPES,
    BF16,
    BOOL,
    E4M3,
    E5M2,
    ELEM_BY_NAME,
    F16,
    F32,
    F64,
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    USIZE,
    ElemType,
    Type,
    is_lossless,
    promote,
)
from cubepy.ir.variable import BUILTINS, SourceLoc, Variable, VarKind, builtin, constant
from cubepy.ir.verifier import verify, verify_scope

__all__ = [
    "ALL_ELEM_TYPES",
    "BF16",
    "BOOL",
    "BUILTINS",
    "E4M3",
    "E5M2",
    "ELEM_BY_NAME",
    "F16",
    "F32",
    "F64",
    "I8",
    "I16",
    "I32",
    "I64",
    "MAX_CONST_BYTES",
    "MAX_CUBE_COUNT",
    "MAX_CUBE_DIM",
    "MAX_UNITS_PER_CUBE",
    "U8",
    "U16",
    "U32",
    "U64",
    "USIZE",
    "ConstTable",
    "ElemType",
    "Instruction",
    "KernelDefinition",
    "Param",
    "ProductFactor",
    "Scope",
    "SourceLoc",
    "Type",
    "Variable",
    "VarKind",
    "branch",
    "builtin",
    "child_scopes",
    "const_table",
    "constant",
    "format_instruction",
    "format_kernel",
    "format_scope",
    "format_variable",
    "is_lossless",
    "launch_shape_problem",
    "ops",
    "promote",
    "verify",
    "verify_scope",
    "walk",
]
