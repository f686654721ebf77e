"""A client that runs every launch on the interp and on the cpu runtime and compares what they wrote.

``differential_client(report)`` returns a ``ComputeClient`` whose back end, per launch, runs the interp,
keeps its results, restores the buffers, runs the compiled cpu code and compares every bound buffer:
bit for bit, except in kernels calling a transcendental function, where floats may differ by
``ULP_BOUND`` units in the last place (see docs/guide/cpu-runtime.md).  The buffers end with the
interp's results, so the test that launched keeps checking the interp.  Kernels the cpu runtime does
not support are recorded with the reason and run on the interp only.
"""

from __future__ import annotations

import json
import os

import numpy as np

from cubepy.errors import CompileError
from cubepy.ir import ops, walk
from cubepy.runtime.client import ComputeClient
from cubepy.runtime.cpu.backend import CpuBackend
from cubepy.runtime.interp.backend import InterpBackend

# Functions the interp computes with numpy and the cpu runtime with the C library.
TRANSCENDENTAL = frozenset(
    {
        "exp",
        "log",
        "log1p",
        "sin",
        "cos",
        "tan",
        "tanh",
        "erf",
        "asin",
        "acos",
        "atan",
        "sinh",
        "cosh",
        "asinh",
        "acosh",
        "atanh",
        "expm1",
        "powf",
        "atan2",
        "hypot",
        "rhypot",
        "powi",
        "cbrt",
    }
)
ULP_BOUND = {np.dtype(np.float16): 1, np.dtype(np.float32): 4, np.dtype(np.float64): 4}
BF16_ULP_BOUND = 1
UNSUPPORTED_MARK = "is not supported by back end cpu"


class DifferentialReport:
    """What the comparisons found: kernels compared, differences, kernels only the interp ran."""

    def __init__(self) -> None:
        self.compared: list[str] = []
        self.within_ulp: list[str] = []
        self.differences: list[dict] = []
        self.skipped: dict[str, str] = {}
        self.shapes: dict[str, str] = {}  # kernel -> how its units ran on cpu (HostKernel.shape)

    def as_dict(self) -> dict:
        """A JSON-able summary."""
        return {
            "compared": len(self.compared),
            "kernels": sorted(set(self.compared)),
            "within_ulp": sorted(set(self.within_ulp)),
            "differences": self.differences,
            "skipped": self.skipped,
            "shapes": self.shapes,
        }

    def write(self, path: str) -> None:
        """Merge this report into the JSON file ``path`` (several test processes may add to it)."""
        data = self.as_dict()
        if os.path.exists(path):
            with open(path) as handle:
                old = json.load(handle)
            data["compared"] += old["compared"]
            data["kernels"] = sorted(set(data["kernels"]) | set(old["kernels"]))
            data["within_ulp"] = sorted(set(data["within_ulp"]) | set(old["within_ulp"]))
            data["differences"] += old["differences"]
            data["skipped"].update(old["skipped"])
            data["shapes"].update(old.get("shapes", {}))
        with open(path, "w") as handle:
            json.dump(data, handle, indent=1)


def uses_transcendental(definition) -> bool:
    """Whether the kernel calls a function whose last bits may differ between numpy and the C library."""
    for inst in walk(definition.body):
        op = inst.operation
        if isinstance(op, (ops.Unary, ops.Binary)) and op.name in TRANSCENDENTAL:
            return True
    return False


def _ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|a - b| in units in the last place, by ordering the bit patterns (NaN vs NaN counts as equal)."""
    width = a.dtype.itemsize * 8
    ints = {16: np.int16, 32: np.int32, 64: np.int64}[width]
    ia, ib = a.view(ints).astype(np.int64), b.view(ints).astype(np.int64)
    # A negative float's bits count down from the sign bit: -(bits without the sign) orders it below +0.
    magnitude = np.int64((1 << (width - 1)) - 1)  # every bit but the sign (no int64 overflow for f64)
    oa = np.where(ia < 0, -(ia & magnitude), ia)
    ob = np.where(ib < 0, -(ib & magnitude), ib)
    distance = np.abs(oa - ob)
    both_nan = np.isnan(a.astype(np.float64)) & np.isnan(b.astype(np.float64))
    return np.where(both_nan, 0, distance)


class DifferentialBackend:
    """Runs the interp, then the cpu runtime on the same inputs, and compares."""

    name = "differential"
    disk_cache_kind = None

    def __init__(self, report: DifferentialReport) -> None:
        self.report = report
        self.interp = InterpBackend()
        self.cpu = CpuBackend(threads=1)  # one thread: atomics happen in one order, as on the interp

    def prepare(self, definition):
        """Both back ends' artifacts; the cpu one is None (with the reason) when it cannot run the kernel."""
        interp_artifact = self.interp.prepare(definition)
        try:
            cpu_artifact, reason = self.cpu.prepare(definition), None
        except CompileError as error:
            if UNSUPPORTED_MARK not in str(error):
                raise
            cpu_artifact, reason = None, str(error).splitlines()[0]
        return definition.name, interp_artifact, cpu_artifact, reason, uses_transcendental(interp_artifact)

    def check_launch(self, artifact, cube_count) -> None:
        """Both back ends' launch checks."""
        self.interp.check_launch(artifact[1], cube_count)
        if artifact[2] is not None:
            self.cpu.check_launch(artifact[2], cube_count)

    def run(self, artifact, cube_count, bindings, *, sanitize: bool, cluster=(1, 1, 1)) -> None:
        """Interp, restore, cpu, compare, leave the interp's results."""
        name, interp_artifact, cpu_artifact, reason, transcendental = artifact
        if cluster != (1, 1, 1):  # the cpu runtime runs no clusters: the interp alone
            self.report.skipped[name] = "the cpu runtime runs no clusters (a cluster launch)"
            self.interp.run(interp_artifact, cube_count, bindings, sanitize=sanitize, cluster=cluster)
            return
        storages = {}
        for binding in [*bindings.buffers, *bindings.tensor_maps]:
            storages[id(binding.handle.storage)] = binding.handle.storage
        before = [storage.copy() for storage in storages.values()]
        self.interp.run(interp_artifact, cube_count, bindings, sanitize=sanitize)
        if cpu_artifact is None:
            self.report.skipped[name] = reason
            return
        expected = [storage.copy() for storage in storages.values()]
        for storage, saved in zip(storages.values(), before):
            storage[...] = saved
        self.cpu.run(cpu_artifact, cube_count, bindings, sanitize=False)
        self.report.compared.append(name)
        self.report.shapes[name] = cpu_artifact.shape
        for storage, want in zip(storages.values(), expected):
            got = storage.copy()
            storage[...] = want
            self._compare(name, got, want, transcendental)

    def _compare(self, name: str, got: np.ndarray, want: np.ndarray, transcendental: bool) -> None:
        if got.tobytes() == want.tobytes():
            return
        if transcendental and (got.dtype.kind == "f" or got.dtype.name == "bfloat16"):
            width = {2: np.float16, 4: np.float32, 8: np.float64}[got.dtype.itemsize]
            distance = _ulp_distance(got.view(width), want.view(width))
            bound = BF16_ULP_BOUND if got.dtype.name == "bfloat16" else ULP_BOUND[np.dtype(width)]
            if int(distance.max()) <= bound:
                self.report.within_ulp.append(name)
                return
        where = np.flatnonzero(got.view(np.uint8) != want.view(np.uint8))
        item = int(where[0]) // got.dtype.itemsize
        self.report.differences.append(
            {
                "kernel": name,
                "dtype": str(got.dtype),
                "index": item,
                "interp": repr(want.reshape(-1)[item]),
                "cpu": repr(got.reshape(-1)[item]),
                "count": int(np.count_nonzero(got.reshape(-1) != want.reshape(-1))),
            }
        )


def differential_client(report: DifferentialReport) -> ComputeClient:
    """A client whose launches run on both runtimes (reads and allocations are the interp's)."""
    return ComputeClient("differential", DifferentialBackend(report))
