"""Run the lowering's arithmetic helpers on the host CPU through LLVM's JIT.

The helpers of ``lower_arith`` emit target-independent LLVM IR (selects, shifts, divisions, saturating
casts); only libdevice calls are NVPTX-specific, and ``fmod`` maps to the C library's.  Compiling the
same IR for x86 and running it on numpy arrays checks the *semantics* of the lowering on edge cases
without a GPU: NVPTX instruction selection preserves LLVM IR semantics.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import re

import llvmlite.ir as ir
import numpy as np

from cubepy.compiler import llvm_types as lt
from cubepy.compiler.llvm_process import binding
from cubepy.compiler.lower import KernelLowering
from cubepy.ir import ElemType, Type

HOST_LIBM = {"__nv_fmodf": "fmodf", "__nv_fmod": "fmod"}


class HostLowering:
    """The slice of ``KernelLowering`` the arithmetic helpers use, with libdevice mapped to libm."""

    sm = 90
    contract = True  # float adds carry LLVM's `contract` flag as in a contracting kernel (no multiply to fuse here)

    def __init__(self, module: ir.Module, builder: ir.IRBuilder) -> None:
        self.module = module
        self.builder = builder

    declare = KernelLowering.declare
    call = KernelLowering.call

    def call_libdevice(self, name: str, ret: ir.Type, args: list[ir.Value]) -> ir.Value:
        return self.call(HOST_LIBM[name], ret, args)


class MissingRuntime(Exception):
    """The host JIT would call a soft-float helper this process cannot provide."""


@functools.cache
def _machine():
    llvm = binding()
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    # GCC >= 12's libgcc_s has the f16 conversion helpers LLVM calls on x86 (__truncsfhf2, ...).
    libgcc = ctypes.util.find_library("gcc_s")
    if libgcc:
        llvm.load_library_permanently(libgcc)
    return llvm.Target.from_default_triple().create_target_machine()


def _define_bf16_helpers(module: ir.Module) -> None:
    """``__truncsfbf2``/``__truncdfbf2`` (not in GCC 12's libgcc): f32 -> bf16 rounding to nearest even.

    The f64 helper rounds through f32 (double rounding), which differs from a direct rounding only on
    values these tests do not use.
    """
    bf16 = lt.BFloatType()
    f32 = ir.FloatType()
    single = ir.Function(module, ir.FunctionType(bf16, [f32]), "__truncsfbf2")
    b = ir.IRBuilder(single.append_basic_block())
    bits = b.bitcast(single.args[0], lt.I32)
    rounded = b.add(
        bits, b.add(ir.Constant(lt.I32, 0x7FFF), b.and_(b.lshr(bits, ir.Constant(lt.I32, 16)), ir.Constant(lt.I32, 1)))
    )
    is_nan = b.fcmp_unordered("uno", single.args[0], single.args[0])
    high = b.select(is_nan, b.or_(bits, ir.Constant(lt.I32, 0x400000)), rounded)
    b.ret(b.bitcast(b.trunc(b.lshr(high, ir.Constant(lt.I32, 16)), lt.I16), bf16))
    double = ir.Function(module, ir.FunctionType(bf16, [ir.DoubleType()]), "__truncdfbf2")
    b = ir.IRBuilder(double.append_basic_block())
    b.ret(b.call(single, [b.fptrunc(double.args[0], f32)]))


def _check_symbols(machine, parsed, module: ir.Module) -> None:
    """Raise MissingRuntime instead of letting MCJIT abort on an unresolvable helper."""
    llvm = binding()
    defined = {f.name for f in module.functions if not f.is_declaration}
    for name in set(re.findall(r"\b(?:call|jmp)q?\s+([A-Za-z_.$][\w.$]*)", machine.emit_assembly(parsed))):
        if name not in defined and not name.startswith(".") and llvm.address_of_symbol(name) is None:
            raise MissingRuntime(f"the host JIT needs {name!r}, which this process does not provide")


_engines = []  # keep JIT engines (and their code) alive for the process


def elementwise(body, in_elems: list[ElemType], out_elem: ElemType):
    """JIT ``out[i] = body(lowering, *inputs[i])`` over numpy arrays (bools as uint8, bf16 as uint16 bits)."""
    llvm = binding()
    machine = _machine()
    module = ir.Module("host")
    module.triple = llvm.get_default_triple()
    module.data_layout = str(machine.target_data)
    ptr = ir.PointerType()
    fn = ir.Function(module, ir.FunctionType(lt.VOID, [ptr] * (len(in_elems) + 1) + [lt.I64]), "kernel")
    *inputs, out, count = fn.args
    entry, loop, done = fn.append_basic_block("entry"), fn.append_basic_block("loop"), fn.append_basic_block("done")
    b = ir.IRBuilder(entry)
    b.cbranch(b.icmp_signed(">", count, ir.Constant(lt.I64, 0)), loop, done)
    b.position_at_end(loop)
    i = b.phi(lt.I64)
    i.add_incoming(ir.Constant(lt.I64, 0), entry)
    lowering = HostLowering(module, b)
    values = []
    for arg, elem in zip(inputs, in_elems):
        mem_t = lt.elem_type(elem, memory=True)
        raw = b.load(b.gep(arg, [i], source_etype=mem_t), typ=mem_t)
        values.append(b.icmp_unsigned("!=", raw, ir.Constant(lt.I8, 0)) if elem.is_bool else raw)
    result = body(lowering, *values)
    if out_elem.is_bool:
        result = b.zext(result, lt.I8)
    b.store(result, b.gep(out, [i], source_etype=lt.elem_type(out_elem, memory=True)))
    following = b.add(i, ir.Constant(lt.I64, 1))
    i.add_incoming(following, b.block)
    b.cbranch(b.icmp_signed("<", following, count), loop, done)
    b.position_at_end(done)
    b.ret_void()
    _define_bf16_helpers(module)
    parsed = llvm.parse_assembly(str(module))
    parsed.verify()
    _check_symbols(machine, parsed, module)
    engine = llvm.create_mcjit_compiler(parsed, machine)
    engine.finalize_object()
    _engines.append(engine)
    cfunc = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * (len(in_elems) + 1)), ctypes.c_int64)(
        engine.get_function_address("kernel")
    )

    def run(*arrays: np.ndarray) -> np.ndarray:
        arrays = [np.ascontiguousarray(a) for a in arrays]
        result = np.zeros(len(arrays[0]), dtype=storage_dtype(out_elem))
        cfunc(*(a.ctypes.data for a in arrays), result.ctypes.data, len(result))
        return result

    return run


def storage_dtype(elem: ElemType) -> np.dtype:
    """The numpy dtype holding ``elem``'s memory bytes."""
    import ml_dtypes

    names = {
        "f16": np.float16,
        "bf16": ml_dtypes.bfloat16,
        "f32": np.float32,
        "f64": np.float64,
        "bool": np.uint8,
        "i8": np.int8,
        "i16": np.int16,
        "i32": np.int32,
        "i64": np.int64,
        "u8": np.uint8,
        "u16": np.uint16,
        "u32": np.uint32,
        "u64": np.uint64,
        "usize": np.uint64,
    }
    return np.dtype(names[elem.name])


def item(elem: ElemType) -> Type:
    """The scalar item type of ``elem``."""
    return Type(elem)
