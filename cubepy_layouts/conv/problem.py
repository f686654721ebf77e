"""``ConvolutionProblem``: the sizes of a 2-D NHWC convolution and of the GEMMs that compute its passes."""

from __future__ import annotations

import attrs

import cubepy as cp

GEMM_KINDS = ("fprop", "wgrad")


@attrs.frozen
class ConvParams:
    """The comptime part of a convolution the layouts specialise on: kernel size, stride, padding, dilation."""

    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]


def _pair(value, name: str) -> tuple[int, int]:
    pair = (value, value) if isinstance(value, int) else tuple(int(v) for v in value)
    if len(pair) != 2:
        raise cp.CubeError(f"{name} must be an int or a pair (h, w), got {value!r}")
    return pair


@attrs.frozen
class ConvolutionProblem:
    """A conv2d with ``x: (N, H, W, C_in)`` and ``w: (C_out, KH, KW, C_in)``, groups = 1."""

    batch: int
    in_h: int
    in_w: int
    in_channels: int
    out_channels: int
    kernel: tuple[int, int]
    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int] = (0, 0)
    dilation: tuple[int, int] = (1, 1)

    @classmethod
    def conv2d(cls, x_shape, w_shape, *, stride=(1, 1), padding=(0, 0), dilation=(1, 1)) -> ConvolutionProblem:
        """The problem of convolving an NHWC ``x_shape`` with a ``w_shape = (C_out, KH, KW, C_in)`` filter."""
        if len(x_shape) != 4 or len(w_shape) != 4:
            raise cp.CubeError(
                f"conv2d takes 4-D shapes (N, H, W, C) and (C_out, KH, KW, C_in), got {x_shape} and {w_shape}"
            )
        if x_shape[3] != w_shape[3]:
            raise cp.CubeError(f"input channels differ: x has {x_shape[3]}, w has {w_shape[3]} (groups = 1)")
        batch, in_h, in_w, in_channels = (int(v) for v in x_shape)
        problem = cls(
            batch,
            in_h,
            in_w,
            in_channels,
            int(w_shape[0]),
            (int(w_shape[1]), int(w_shape[2])),
            _pair(stride, "stride"),
            _pair(padding, "padding"),
            _pair(dilation, "dilation"),
        )
        if min(problem.out_shape) <= 0 or min(problem.stride) <= 0 or min(problem.dilation) <= 0:
            raise cp.CubeError(
                f"conv2d of {x_shape} with {w_shape} (stride {problem.stride}, padding "
                f"{problem.padding}, dilation {problem.dilation}) has an empty output"
            )
        return problem

    def _out_extent(self, dim: int) -> int:
        size = (self.in_h, self.in_w)[dim]
        span = self.dilation[dim] * (self.kernel[dim] - 1) + 1
        return (size + 2 * self.padding[dim] - span) // self.stride[dim] + 1

    @property
    def out_h(self) -> int:
        """Output height."""
        return self._out_extent(0)

    @property
    def out_w(self) -> int:
        """Output width."""
        return self._out_extent(1)

    @property
    def x_shape(self) -> tuple[int, int, int, int]:
        """``(N, H, W, C_in)``."""
        return (self.batch, self.in_h, self.in_w, self.in_channels)

    @property
    def w_shape(self) -> tuple[int, int, int, int]:
        """``(C_out, KH, KW, C_in)``."""
        return (self.out_channels, *self.kernel, self.in_channels)

    @property
    def out_shape(self) -> tuple[int, int, int, int]:
        """``(N, OH, OW, C_out)``."""
        return (self.batch, self.out_h, self.out_w, self.out_channels)

    @property
    def pixels(self) -> int:
        """Output pixels over all images: ``N * OH * OW``."""
        return self.batch * self.out_h * self.out_w

    @property
    def patch(self) -> int:
        """One im2col row: ``KH * KW * C_in``."""
        return self.kernel[0] * self.kernel[1] * self.in_channels

    @property
    def params(self) -> ConvParams:
        """The comptime parameters the layouts specialise on."""
        return ConvParams(self.kernel, self.stride, self.padding, self.dilation)

    def gemm(self, kind: str) -> tuple[int, int, int]:
        """``(m, n, k)`` of the GEMM that computes pass ``kind`` ("fprop" or "wgrad")."""
        if kind == "fprop":
            return (self.pixels, self.out_channels, self.patch)
        if kind == "wgrad":
            return (self.out_channels, self.patch, self.pixels)
        raise cp.CubeError(f"unknown GEMM kind {kind!r}; expected one of {GEMM_KINDS}")
