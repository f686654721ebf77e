"""Loop references and small helpers for the TMA emulation tests (tiled and im2col).

The references are plain loops over the rules of docs/semantics/tma.md, written independently of
``cubepy.runtime.interp.tma``; the tests compare the emulator with them.
"""

from __future__ import annotations

import types

import ml_dtypes
import numpy as np
import pytest

from cubepy.errors import TensorMapError
from cubepy.runtime.handle import Handle
from cubepy.runtime.tensormap import TensorMapArg

SENTINEL = 0xA5


def to_handle(array, dtype=None):
    """A contiguous CPU handle holding a copy of `array`."""
    data = np.ascontiguousarray(array, dtype=dtype)
    return Handle(None, data.reshape(-1).copy(), data.dtype, data.shape)


def smem_of(nbytes):
    return np.full(nbytes, SENTINEL, np.uint8)


def as_values(smem, dst, dtype, shape):
    dtype = np.dtype(dtype)
    count = int(np.prod(shape))
    return smem[dst : dst + count * dtype.itemsize].view(dtype).reshape(shape)


def raw_map(tm, **changes):
    """A copy of `tm`'s fields with some changed, bypassing the encoder (for emulator-only cases)."""
    fields = {name: getattr(tm, name) for name in TensorMapArg.__slots__}
    return types.SimpleNamespace(**{**fields, **changes})


def nan_bytes(dtype):
    return np.full(1, np.nan, dtype).view(np.uint8)


# ---------------------------------------------------------------------------------- loop references


def ref_swizzle(addr, swizzle):
    """PTX swizzle tables: 16-byte chunk x of 128-byte line y goes to chunk x ^ (y mod k)."""
    k = {"none": 1, "32B": 2, "64B": 4, "128B": 8}[swizzle]
    line, chunk, byte = addr // 128, (addr // 16) % 8, addr % 16
    return line * 128 + (chunk ^ (line % k)) * 16 + byte


def ref_store_image(smem, dst, image, swizzle):
    for o in range(0, len(image), 16):
        a = ref_swizzle(dst + o, swizzle)
        smem[a : a + 16] = image[o : o + 16]


def ref_tiled_image(gmem, address, es, dims, byte_strides, box, estr, coords, fill):
    """Section 1.5: the dense linear image of a tile-mode box, one element at a time (dim 0 fastest)."""
    r = len(dims)
    e = [1, *estr[1:]]
    n = [-(-box[i] // e[i]) for i in range(r)]
    image = []
    for k_rev in np.ndindex(*reversed(n)):
        k = k_rev[::-1]
        g = [coords[i] + k[i] * e[i] for i in range(r)]
        if all(0 <= g[i] < dims[i] for i in range(r)):
            a = address + sum(g[i] * byte_strides[i] for i in range(r))
            image.extend(gmem[a : a + es])
        else:
            image.extend(fill)
    return np.array(image, np.uint8)


def ref_im2col_rows(dims, lower, upper, estr, ppc, coords, offsets):
    """Section 2.3's enumeration loop, verbatim: (n, pixel) per shared-memory row."""
    rank = len(dims)
    s = rank - 2
    last = [dims[1 + j] - 1 + upper[j] for j in range(s)]
    b = list(coords[1 : 1 + s])
    n = coords[rank - 1]
    rows = []
    for _ in range(ppc):
        rows.append((n, [b[j] + offsets[j] for j in range(s)]))
        j = 0
        b[0] += estr[1]
        while j < s and b[j] > last[j]:
            b[j] = lower[j]
            if j + 1 < s:
                b[j + 1] += estr[j + 2]
            else:
                n += estr[rank - 1]
            j += 1
    return rows


def ref_im2col_image(x, rows, c0, cpp, fill):
    """Section 2.5: channels c0..c0+cpp of each row's pixel of the NDHWC array `x`, filled when OOB."""
    out = []
    for n, pix in rows:
        spatial = tuple(reversed(pix))  # rows hold W first; numpy indexes (..., H, W)
        ok = 0 <= n < x.shape[0] and all(0 <= p < d for p, d in zip(spatial, x.shape[1:-1]))
        for k in range(cpp):
            ch = c0 + k
            if ok and 0 <= ch < x.shape[-1]:
                out.extend(np.asarray(x[(n, *spatial, ch)]).reshape(1).view(np.uint8))
            else:
                out.extend(fill)
    return np.array(out, np.uint8)


def direct_im2col(x, tap, c0, cpp, m0, ppc, stride, pad, dil, filt):
    """Section 2.4 from the convolution side: row p is output pixel m0 + p, reading
    X[n, o*stride - pad + tap*dil, c0:c0+cpp] with zeros in the padding and past the last image."""
    n_img, spatial, chans = x.shape[0], x.shape[1:-1], x.shape[-1]
    out_dims = [(i + 2 * p - d * (f - 1) - 1) // s + 1 for i, p, d, f, s in zip(spatial, pad, dil, filt, stride)]
    rows = np.zeros((ppc, cpp), x.dtype)
    for p in range(ppc):
        m = m0 + p
        n, rest = divmod(m, int(np.prod(out_dims)))
        o = np.unravel_index(rest, out_dims)
        idx = [o[j] * stride[j] - pad[j] + tap[j] * dil[j] for j in range(len(spatial))]
        if n < n_img and all(0 <= i < d for i, d in zip(idx, spatial)):
            for k in range(cpp):
                if 0 <= c0 + k < chans:
                    rows[p, k] = x[(n, *idx, c0 + k)]
    return rows, out_dims


def expect_error(pattern, fn, *args):
    with pytest.raises(TensorMapError, match=pattern):
        fn(*args)


DTYPES = [np.float16, ml_dtypes.bfloat16, np.float32, np.float64, np.int8, np.uint16, np.int32, np.uint64]
