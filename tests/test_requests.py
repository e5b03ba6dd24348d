"""The typed requests of the measurements: each is checked once when made (a bad value is one
UsageError line), reads back through the CLI's own parser from its to_argv(), and is carried by
the result it asks for (the JSON's "requests" are their commands)."""

from __future__ import annotations

import dataclasses
import json
import shlex
from pathlib import Path

import pytest

import gdlbench
from gdlbench import cli
from gdlbench.cli.commands import compress as compress_cmd
from gdlbench.cli.commands import conv as conv_cmd
from gdlbench.cli.commands import copy as copy_cmd
from gdlbench.cli.commands import gemm as gemm_cmd
from gdlbench.cli.commands import io as io_cmd
from gdlbench.cli.commands import iteration as iteration_cmd
from gdlbench.cli.commands import layer as layer_cmd
from gdlbench.cli.commands import update as update_cmd
from gdlbench.common.errors import UsageError
from gdlbench.composed.iteration import Iteration, IterationRequest
from gdlbench.primitives.compress import CompressRequest
from gdlbench.primitives.conv import ConvRequest, ConvShape
from gdlbench.primitives.copy import CopyRequest
from gdlbench.primitives.gemm import GemmRequest
from gdlbench.primitives.io import IoRequest
from gdlbench.primitives.layers import LayerRequest
from gdlbench.primitives.update import UpdateRequest

MLP = str(Path(__file__).parent / "data" / "mlp.json")
SPEC = {"type": "relu", "in_shapes": [[64]], "out_shape": [64], "attrs": {}, "param_shapes": []}


def parse(argv: list[str]):
    return cli.build_parser().parse_args(argv)


def back(request):
    """The request(s) the CLI builds from the request's own command line."""
    args = parse(request.to_argv())
    made = {"gemm": lambda: gemm_cmd.requests_from_args(args), "conv": lambda: conv_cmd.requests_from_args(args),
            "copy": lambda: copy_cmd.requests_from_args(args, "cuda" if request.device == "cuda" else "cpu"),
            "update": lambda: [update_cmd.request_from_args(args)],
            "compress": lambda: compress_cmd.requests_from_args(args), "io": lambda: io_cmd.requests_from_args(args),
            "layer": lambda: [layer_cmd.request_from_args(args)],
            "iteration": lambda: [iteration_cmd.request_from_args(args)]}[args.command]
    return made()


ROUND_TRIPS = [
    GemmRequest(),
    GemmRequest(64, 32, 16, "float64", "cpu", 3, 0, 2, False, True, True, 7),
    ConvRequest(),
    ConvRequest(ConvShape(2, 4, 9, 7, 6, 3, 1, (2, 1), (1, 0), (1, 2), 2, True), ("bwd-data", "fwd"), "cuda",
                "float16", "nhwc", "fwd:FFT", 0, True, 3, 1, None, False),
    CopyRequest(4096),
    CopyRequest(3 << 20, "d2h", "pageable", "cuda", 16, 5, 0, 3),
    CopyRequest(1000, "d2d", device="cuda"),
    UpdateRequest(),
    UpdateRequest(1000, "cpu", 0.1, 0.0, 1e-5, 3, 1, 2, False),
    CompressRequest(),
    CompressRequest(12.5, 1000, 2, 0, False),
    IoRequest(),
    IoRequest(8, 2, False, 16, (64, 32), "/tmp/x", 3, 0),
    LayerRequest(),
    LayerRequest("alexnet-fc6,resnet50-bn2a", 4, "cpu", ("bwd-data",), 2, 0, 1),
    LayerRequest(SPEC, 2),
    IterationRequest(),
    IterationRequest(MLP, 2, "cpu", "serial,wfbp", 3, 0, 1, False, "/tmp/d", 2, 0.0, 0.5, 2, 10.0),
]


@pytest.mark.parametrize("request_", ROUND_TRIPS, ids=lambda r: shlex.join(r.to_argv()))
def test_request_reads_back_through_the_cli(request_):
    assert back(request_) == [request_]


BAD = [
    (lambda: GemmRequest(0), "m must be a positive integer"),
    (lambda: GemmRequest(dtype="int8"), "unknown dtype"),
    (lambda: GemmRequest(iters=0), "--iters"),
    (lambda: GemmRequest(threads=0), "--threads"),
    (lambda: GemmRequest(device="tpu"), "--device"),
    (lambda: ConvRequest(ConvShape(1, 3, 2, 2, 4, 5, 5)), "larger than the padded input"),
    (lambda: ConvRequest(passes=("fwd", "sideways")), "pass must be"),
    (lambda: ConvRequest(device="cpu", layout="nhwc"), "NCHW only"),
    (lambda: ConvRequest(device="cpu", dtype="float16"), "not available on cpu"),
    (lambda: ConvRequest(workspace_limit=-1), "--workspace-limit"),
    (lambda: CopyRequest(0), "positive number of bytes"),
    (lambda: CopyRequest(64, "sideways"), "direction"),
    (lambda: CopyRequest(64, copies=0), "--copies"),
    (lambda: UpdateRequest(momentum=1.0), "--momentum"),
    (lambda: UpdateRequest(0), "params must be"),
    (lambda: CompressRequest(0.5), "ratio must be"),
    (lambda: CompressRequest(values=0), "values must be"),
    (lambda: IoRequest(batch=0), "--batch"),
    (lambda: IoRequest(size=(4, 4)), "between 8 and 16384"),
    (lambda: LayerRequest("nope"), "unknown nope"),
    (lambda: LayerRequest(batch=0), "--batch"),
    (lambda: LayerRequest(passes="fwd,up"), "pass must be"),
    (lambda: IterationRequest(batch=0), "--batch"),
    (lambda: IterationRequest(strategy="nope"), "nope"),
    (lambda: IterationRequest(target_se_pct=-1.0), "--target-se"),
    (lambda: IterationRequest(budget_s=float("nan")), "--max-seconds"),
    (lambda: IterationRequest(min_rounds=0), "--min-rounds"),
    (lambda: IterationRequest(timeout=-1.0), "--timeout"),
]


@pytest.mark.parametrize("make,match", BAD, ids=[m for _, m in BAD])
def test_bad_request_is_one_usage_line(make, match):
    with pytest.raises(UsageError, match=match) as exc:
        make()
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("argv,match", [
    (["gemm", "-m", "0"], "m must be a positive integer"),
    (["conv", "-n", "0", "-c", "3"], "n must be a positive integer"),
    (["conv", "--pass", "fwd,nope"], "pass must be"),
    (["copy", "--copies", "0", "--size", "64"], "--copies"),
    (["update", "--momentum", "1"], "--momentum"),
    (["compress", "--ratio", "0.5"], "ratio must be"),
    (["io", "--batch", "0"], "--batch"),
    (["layer", "--layer", "alexnet-fc6", "-b", "0"], "--batch"),
    (["iteration", "--net", MLP, "--min-rounds", "0"], "--min-rounds"),
])
def test_cli_reports_the_request_check(argv, match, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert match in err and "\n" not in err


def test_the_keyword_api_builds_the_same_request():
    r = gdlbench.gemm(24, 16, 8, device="cpu", iters=2, warmup=0, threads=1)
    assert r.request == GemmRequest(24, 16, 8, "float32", "cpu", 2, 0, 1)
    assert gdlbench.gemm(r.request).request == r.request
    (c,) = gdlbench.conv(1, 2, 5, 5, 2, 3, 3, pad=1, passes="fwd", device="cpu", iters=1, warmup=0, threads=1)
    assert c.request == ConvRequest(ConvShape(1, 2, 5, 5, 2, 3, 3, pad=(1, 1)), ("fwd",), "cpu", iters=1, warmup=0,
                                    threads=1)
    assert gdlbench.conv(c.request)[0].request == c.request
    assert gdlbench.copy(4096, device="cpu", iters=2, warmup=0, threads=1).request == CopyRequest(
        4096, device="cpu", iters=2, warmup=0, threads=1)
    u = gdlbench.update(1000, "cpu", iters=2, warmup=0, threads=1)
    assert u.request == UpdateRequest(1000, "cpu", iters=2, warmup=0, threads=1)
    assert gdlbench.compress(10, 1000, iters=1, warmup=0).request == CompressRequest(10.0, 1000, 1, 0)
    rs = gdlbench.layer("alexnet-fc6,resnet50-bn2a", 2, "cpu", "fwd", iters=1, warmup=0, threads=1)
    assert [r.request.layer for r in rs] == ["alexnet-fc6", "resnet50-bn2a"]  # each its own layer's
    assert rs[0].request.to_argv()[:3] == ["layer", "--layer", "alexnet-fc6"]


def test_io_request_carried(tmp_path):
    r = gdlbench.io(IoRequest(batch=2, threads=1, images=4, size=(16, 16), directory=str(tmp_path), iters=1,
                              warmup=0))
    assert r.request.directory == str(tmp_path) and r.batch == 2 and r.size == (16, 16)


def test_iteration_result_carries_its_request():
    req = IterationRequest(MLP, 2, "cpu", "serial", iters=1, warmup=0, threads=1, io=False)
    r = Iteration(req).measure()
    assert r.request is req
    kw = Iteration(MLP, 2, "cpu", "serial", iters=1, warmup=0, threads=1, io=False)
    assert kw.request == req
    assert dataclasses.replace(req, batch=4).to_argv()[req.to_argv().index("--batch") + 1] == "4"


def test_json_names_the_commands_that_measure_again(tmp_path):
    out = tmp_path / "g.json"
    assert cli.main(["gemm", "--shapes", "8x8x8,16x8x4", "--device", "cpu", "--iters", "2", "--warmup", "0",
                     "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    again = doc["args"]["requests"]
    assert len(again) == 2 and again[1].startswith("gdlbench gemm -m 16 -n 8 -k 4 ")
    args = parse(shlex.split(again[1])[1:])
    assert gemm_cmd.requests_from_args(args) == [GemmRequest(16, 8, 4, device="cpu", iters=2, warmup=0)]
