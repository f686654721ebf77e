"""``cubepy demo`` (``cubepy_layouts.demo.main``): runs, matches numpy, writes PTX and resource reports."""

import argparse

import cubepy as cp
from cubepy_layouts import demo


def test_demo_runs_and_writes_the_ptx(tmp_path, capsys):
    status = demo.main(cp.client("interp"), argparse.Namespace(out=str(tmp_path), runtime=None))
    printed = capsys.readouterr().out
    assert status == 0, printed
    for text in (
        "GEMM M = C_out = 32, N = KH*KW*C_in = 288, K = N*OH*OW = 392",
        "tiles 16x16x16",
        "2 stages",
        "tma   path",
        "max |error|",
        "ok",
    ):
        assert text in printed
    ptx = (tmp_path / "conv2d_wgrad_tma.ptx").read_text()
    assert "cp.async.bulk.tensor.4d.shared::cluster.global.im2col" in ptx and "wmma.mma.sync" in ptx
    assert (tmp_path / "conv2d_wgrad_tma.resources.txt").read_text().strip()
