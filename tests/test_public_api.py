"""Every name in gdlbench.__all__, called as a user calls it (one rank, in process): each test
checks the number or the property the name is for. test_every_public_name_has_a_test keeps the
list whole: a name added to __all__ without a test here fails it."""

from __future__ import annotations

import json

import numpy as np
import pytest

import gdlbench
from gdlbench.primitives import costmodel

TESTS = {}


def covers(*names):
    def register(fn):
        for n in names:
            TESTS[n] = fn
        return fn
    return register


def test_every_public_name_has_a_test():
    assert set(TESTS) == set(gdlbench.__all__)


@covers("gemm", "GemmResult", "Measurement")
def test_gemm():
    r = gdlbench.gemm(64, 48, 32, dtype="float64", device="cpu", iters=3, warmup=1)
    assert isinstance(r, gdlbench.GemmResult) and isinstance(r.measurement, gdlbench.Measurement)
    assert (r.m, r.n, r.k) == (64, 48, 32) and r.check["wrong"] == 0 and r.check["passed"]
    assert len(r.measurement.samples_us) == 3
    assert r.tflops == pytest.approx(2 * 64 * 48 * 32 / (r.measurement.median * 1e6))
    m = gdlbench.Measurement([3.0, 1.0, 2.0], "steady-clock", "x")
    assert (m.median, m.min, m.max) == (2.0, 1.0, 3.0)
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.ones((4, 2), dtype=np.float32)
    assert gdlbench.gemm(a=a, b=b, iters=1, warmup=0).check["wrong"] == 0


@covers("GemmRequest", "ConvRequest", "LayerRequest", "CollectiveRequest", "CopyRequest", "UpdateRequest",
        "IoRequest", "CompressRequest", "IterationRequest")
def test_requests_ask_and_are_carried(tmp_path):
    """Each measurement as a typed request: the function takes it, the result carries it, and
    to_argv() is its command (tests/test_requests.py reads each back through the CLI)."""
    asked = [gdlbench.GemmRequest(16, 16, 16, device="cpu", iters=1, warmup=0),
             gdlbench.ConvRequest(gdlbench.ConvShape(1, 2, 5, 5, 2, 3, 3), ("fwd",), "cpu", iters=1, warmup=0),
             gdlbench.LayerRequest("alexnet-fc6", 1, "cpu", ("fwd",), 1, 0),
             gdlbench.CopyRequest(4096, device="cpu", iters=1, warmup=0),
             gdlbench.UpdateRequest(1000, "cpu", iters=1, warmup=0),
             gdlbench.IoRequest(1, 1, images=2, size=(16, 16), directory=str(tmp_path), iters=1, warmup=0),
             gdlbench.CompressRequest(10.0, 1000, 1, 0)]
    results = [gdlbench.gemm(asked[0]), gdlbench.conv(asked[1])[0], gdlbench.layer(asked[2])[0],
               gdlbench.copy(asked[3]), gdlbench.update(asked[4]), gdlbench.io(asked[5]), gdlbench.compress(asked[6])]
    for req, r in zip(asked, results, strict=True):
        assert r.request == req and req.to_argv()[0] == r.command
    ar = gdlbench.allreduce([64], iters=1, warmup=0)[0]
    assert isinstance(ar.request, gdlbench.CollectiveRequest) and ar.request.to_argv()[:3] == ["allreduce", "--size", "64"]
    it = gdlbench.IterationRequest("tests/data/mlp.json", 2, "cpu", "serial", iters=1, warmup=0, io=False)
    assert it.to_argv()[:3] == ["iteration", "--net", "tests/data/mlp.json"]
    with pytest.raises(gdlbench.UsageError, match="--batch"):
        gdlbench.IterationRequest(batch=0)


@covers("conv", "ConvResult", "ConvShape")
def test_conv():
    rows = gdlbench.conv(2, 3, 8, 8, 4, 3, 3, pad=1, device="cpu", iters=2, warmup=0)
    assert [r.pass_ for r in rows] == ["fwd", "bwd-data", "bwd-filter"]
    assert all(isinstance(r, gdlbench.ConvResult) and r.check["wrong"] == 0 for r in rows)
    sh = gdlbench.ConvShape(2, 3, 8, 8, 4, 3, 3, (1, 1), (1, 1))
    assert rows[0].shape == sh and (sh.p, sh.q) == (8, 8)


@covers("layer", "LayerResult")
def test_layer():
    rows = gdlbench.layer("alexnet-pool1", batch=1, device="cpu", iters=2, warmup=0)
    assert [r.pass_ for r in rows] == ["fwd", "bwd"]
    assert all(isinstance(r, gdlbench.LayerResult) and r.measurement.median > 0 and r.batch == 1 for r in rows)


@covers("allreduce", "CollectiveResult")
def test_allreduce():
    rows = gdlbench.allreduce(["1K", 4096], "int32", "max", iters=2, warmup=0, check=2)
    assert [(r.size_bytes, r.inplace) for r in rows] == [(1024, False), (1024, True), (4096, False), (4096, True)]
    assert all(isinstance(r, gdlbench.CollectiveResult) and r.wrong == 0 and r.nranks == 1 for r in rows)
    assert rows[0].count == 256 and rows[0].to_dict()["op"] == "max"


@covers("reduce_scatter")
def test_reduce_scatter():
    rows = gdlbench.reduce_scatter([64], "float64", "min", iters=2, warmup=0)
    assert [(r.collective, r.count, r.wrong) for r in rows] == [("reduce_scatter", 8, 0)] * 2


@covers("allgather")
def test_allgather():
    rows = gdlbench.allgather([64], "bfloat16", iters=2, warmup=0, inplace=False)
    assert [(r.collective, r.count, r.inplace, r.wrong) for r in rows] == [("allgather", 32, False, 0)]


@covers("broadcast")
def test_broadcast():
    rows = gdlbench.broadcast([100], "int32", root=0, iters=2, warmup=0)
    assert [(r.collective, r.count, r.root, r.wrong) for r in rows] == [("broadcast", 25, 0, 0)]
    with pytest.raises(gdlbench.UsageError, match="root"):
        gdlbench.broadcast([100], root=1)


@covers("copy", "CopyResult")
def test_copy():
    r = gdlbench.copy("64K", "h2d", device="cpu", copies=1, iters=2, warmup=0)
    assert isinstance(r, gdlbench.CopyResult) and r.size_bytes == 65536 and r.wrong == 0
    assert r.to_dict()["size_bytes"] == 65536


@covers("update", "UpdateResult")
def test_update():
    r = gdlbench.update("4K", device="cpu", iters=2, warmup=0)  # counts: K = 1000
    assert isinstance(r, gdlbench.UpdateResult) and r.params == 4000 and r.check["passed"] and r.check["wrong"] == 0


@covers("io", "IoResult")
def test_io(tmp_path):
    r = gdlbench.io(2, threads=1, images=4, size=(16, 16), directory=tmp_path, iters=2, warmup=0)
    assert isinstance(r, gdlbench.IoResult) and r.batch == 2 and r.size == (16, 16) and r.mean_file_bytes > 0


@covers("compress", "CompressResult")
def test_compress():
    r = gdlbench.compress(10, "20K", iters=2, warmup=0)
    assert isinstance(r, gdlbench.CompressResult) and r.wrong == 0
    assert r.values == 20000 and r.kept == 1000  # k = n / (2r)
    assert r.encode_us_per_byte == pytest.approx(r.measurement.median / (4 * 20000))


@covers("Iteration", "IterationResult", "load_network", "Network")
def test_iteration(tmp_path):
    net = gdlbench.load_network(str(__import__("pathlib").Path(__file__).parent / "data" / "mlp.json"))
    assert isinstance(net, gdlbench.Network) and net.params > 0
    r = gdlbench.Iteration(net, batch=2, device="cpu", strategy="serial", iters=2, warmup=0, io=False).measure()
    assert isinstance(r, gdlbench.IterationResult) and r.batch == 2 and r.world_size == 1
    assert [run.strategy.name for run in r.runs] == ["serial"] and r.runs[0].composed.median > 0


@covers("predict", "PredictResult", "Phases")
def test_predict():
    ph = gdlbench.Phases.synthetic("alexnet", 32)
    r = gdlbench.predict("alexnet", ph, alpha_us=5, bandwidth_gbs=10, strategy="serial", workers=[1, 8])
    assert isinstance(r, gdlbench.PredictResult)
    rows = r.rows()
    assert [x["workers"] for x in rows] == [1, 8] and rows[0]["speedup"] == pytest.approx(1.0)
    assert rows[1]["comm_us"] > 0 and rows[1]["t_iter_us"] > rows[0]["t_iter_us"]


@covers("Compare")
def test_compare(tmp_path):
    g = gdlbench.gemm(32, 32, 32, device="cpu", iters=2, warmup=0)
    ar = gdlbench.allreduce([64], iters=2, warmup=0)
    cmp = gdlbench.Compare([g, *ar])
    cmp.write_dir(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["allreduce.csv", "allreduce.json", "gemm.csv", "gemm.json"]
    rows = json.loads((tmp_path / "gemm.json").read_text())["rows"]
    assert rows == [json.loads(json.dumps(g.to_dict()))]


@covers("CommModel", "load_comm_model")
def test_comm_model(tmp_path):
    cm = gdlbench.CommModel("ring", 2.0, 1e-4)
    assert cm.predict_us(1000, 4) == pytest.approx(costmodel.time_us("ring", 1000, 4, 2.0, 1e-4))
    path = tmp_path / "fit.json"
    path.write_text(json.dumps({"summary": {"fit": [{"algo": "tree", "alpha_us": 3, "beta_us_per_byte": 2e-4}]}}))
    loaded = gdlbench.load_comm_model(path)
    assert (loaded.algo, loaded.alpha_us, loaded.beta_us_per_byte) == ("tree", 3, 2e-4)


@covers("Prediction", "predict_iteration", "predict_scaling", "Strategy", "get_strategies", "PRESETS")
def test_model_functions():
    ph = gdlbench.Phases.synthetic("alexnet", 32)
    cm = gdlbench.CommModel("ring", 5.0, 1e-4)
    serial, wfbp = gdlbench.get_strategies("serial,wfbp")
    assert isinstance(serial, gdlbench.Strategy) and set(gdlbench.PRESETS) >= {"serial", "wfbp"}
    p1 = gdlbench.predict_iteration("alexnet", ph, cm, serial, 1)
    p8 = gdlbench.predict_iteration("alexnet", ph, cm, serial, 8)
    assert isinstance(p8, gdlbench.Prediction) and p1.comm_us == 0
    assert p8.t_iter_us == pytest.approx(p1.t_iter_us + p8.comm_us)  # serial: nothing overlaps the messages
    assert gdlbench.predict_iteration("alexnet", ph, cm, wfbp, 8).t_iter_us < p8.t_iter_us
    rows = gdlbench.predict_scaling("alexnet", ph, cm, [serial], [1, 8])
    assert [r["t_iter_us"] for r in rows] == pytest.approx([p1.t_iter_us, p8.t_iter_us])
    custom = gdlbench.Strategy("mine", overlap="wfbp", bucket_bytes=1 << 20)
    assert gdlbench.predict_iteration("alexnet", ph, cm, custom, 8).t_iter_us > 0


@covers("AlphaBetaFit", "fit_alpha_beta")
def test_fit_alpha_beta():
    sizes = [2**k for k in range(10, 24)]
    a, b, _ = costmodel.coefficients("ring", 4)
    times = [a * 3.0 + m * b * 2e-4 for m in sizes]
    f = gdlbench.fit_alpha_beta(sizes, times, "ring", 4, gamma_us_per_byte=0.0)
    assert isinstance(f, gdlbench.AlphaBetaFit)
    assert f.alpha_us == pytest.approx(3.0, rel=1e-6) and f.beta_us_per_byte == pytest.approx(2e-4, rel=1e-6)
    assert f.link_gbs == pytest.approx(5.0, rel=1e-6)
    # two sizes are enough for two unknowns; one is not; regimes outside 1-8 are refused
    two = gdlbench.fit_alpha_beta(sizes[:2], times[:2], "ring", 4, gamma_us_per_byte=0.0)
    assert two.alpha_us == pytest.approx(3.0, rel=1e-6) and two.beta_us_per_byte == pytest.approx(2e-4, rel=1e-6)
    with pytest.raises(gdlbench.UsageError, match="two different sizes"):
        gdlbench.fit_alpha_beta(sizes[:1] * 2, times[:1] * 2, "ring", 4)
    for bad in (0, 9, 2.0, True):
        with pytest.raises(gdlbench.UsageError, match="regimes"):
            gdlbench.fit_alpha_beta(sizes, times, "ring", 4, regimes=bad)


@covers("fit_results")
def test_fit_results():
    """Results as a 4-rank sweep returns them (built here: one rank communicates nothing), their
    times the ring's formula: the fit gives alpha and beta back."""
    a, b, _ = costmodel.coefficients("ring", 4)
    sizes = [2**k for k in range(12, 24, 2)]
    rows = [gdlbench.CollectiveResult("allreduce", m, m // 4, "float32", "sum", "ring", "mpi", True, 4,
                                      gdlbench.Measurement([a * 3.0 + m * b * 2e-4] * 3, "steady-clock"), wrong=0)
            for m in sizes]
    fits = gdlbench.fit_results(rows, gamma_us_per_byte=0.0)
    assert [f.algo for f in fits] == ["ring"] and fits[0].sizes_bytes == sizes and fits[0].nranks == 4
    assert fits[0].alpha_us == pytest.approx(3.0, rel=1e-6) and fits[0].beta_us_per_byte == pytest.approx(2e-4, rel=1e-6)


@covers("builtin_nets")
def test_builtin_nets():
    names = gdlbench.builtin_nets()
    assert {"alexnet", "googlenet", "resnet50"} <= set(names)
    assert gdlbench.load_network("resnet50").params == 25_557_032


@covers("environment")
def test_environment():
    env = gdlbench.environment()
    assert env["world_size"] == 1 and env["gdlbench"] == gdlbench.__version__
    assert env["mpi_thread_level"] in ("funneled", "serialized", "multiple", "single")


@covers("cuda_status")
def test_cuda_status():
    n, why = gdlbench.cuda_status()
    assert isinstance(n, int) and n >= 0 and isinstance(why, str) and (n > 0 or why)


@covers("init_mpi", "MpiInit")
def test_init_mpi():
    got = gdlbench.init_mpi()
    assert isinstance(got, gdlbench.MpiInit) and got.level in ("single", "funneled", "serialized", "multiple")
    assert gdlbench.init_mpi() == got  # once initialised, the same answer


@covers("CheckFailed", "UsageError")
def test_errors():
    with pytest.raises(gdlbench.UsageError, match="m must be a positive integer"):
        gdlbench.gemm(0, 4, 4, device="cpu")
    assert issubclass(gdlbench.CheckFailed, Exception) and not issubclass(gdlbench.CheckFailed, gdlbench.UsageError)


@covers("import_trace", "ImportedTrace")
def test_import_trace(tmp_path):
    """A hand-made trace of one step, every phase's time known: data 0-10, forward 10-40, backward
    40-100 (two gradients ready at 70 and 95), idle 100-120, optimizer 120-150 (us)."""
    import json

    def span(name, ts, dur, cat="cpu_op", tid=1, **args):
        return {"ph": "X", "name": name, "ts": ts, "dur": dur, "cat": cat, "pid": 1, "tid": tid, "args": args}

    acc = "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad"
    events = [span("ProfilerStep#1", 0, 150, "user_annotation"),
              span("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 10, "user_annotation"),
              span("aten::linear", 10, 30),
              span("autograd::engine::evaluate_function: AddmmBackward0", 40, 20),
              span(acc, 60, 10), span("torch::autograd::AccumulateGrad", 61, 2, **{"Input Dims": [[8, 4]],
                                                                                  "Input type": ["float"]}),
              span(acc, 90, 5), span("torch::autograd::AccumulateGrad", 91, 1, **{"Input Dims": [[8]],
                                                                                 "Input type": ["c10::BFloat16"]}),
              span("autograd::engine::evaluate_function: TBackward0", 95, 5),
              span("Optimizer.step#SGD.step", 120, 30, "user_annotation")]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events, "distributedInfo": {"world_size": 1, "backend": "gloo"}}))
    t = gdlbench.import_trace(path, batch=8)
    assert isinstance(t, gdlbench.ImportedTrace) and (t.batch, t.world_size, t.backend) == (8, 1, "gloo")
    s = t.steps[0]
    assert (s.io_us, s.h2d_us, s.forward_us, s.backward_us, s.exposed_comm_us, s.update_us) == (10, 0, 30, 60, 20, 30)
    assert [(g.shape, g.bytes, g.ready_us) for g in t.gradients] == [((8, 4), 128, 30), ((8,), 16, 55)]
    net = gdlbench.load_network(t.network_spec())
    assert [lay.name for lay in net.layers] == ["backward tail", "grad1 8", "grad0 8x4"] and net.params == 40
    doc = t.phases_doc()
    assert {r["layer"]: r["time_us"] for r in doc["rows"] if "layer" in r} == {"grad0 8x4": 30, "grad1 8": 25,
                                                                               "backward tail": 5}
    # the profiler's cost out: 9 recorded spans in the step, 1 us each when the step took 141 us unprofiled
    c = gdlbench.import_trace(path, batch=8, step_us=141.0)
    s = c.steps[0]
    assert c.profiler_us_per_event == pytest.approx(1.0)
    assert (s.io_us, s.forward_us, s.backward_us, s.exposed_comm_us, s.update_us) == pytest.approx((9, 29, 54, 20, 29))
    assert s.total_us == pytest.approx(141.0) and [g.ready_us for g in c.gradients] == pytest.approx([27, 50])
    with pytest.raises(gdlbench.UsageError, match="--step-ms"):
        gdlbench.import_trace(path, batch=8, step_us=-1.0)


@covers("PredictRequest", "CommSource", "evaluate", "Evaluation")
def test_predict_request(tmp_path):
    """A typed request prices what `gdlbench predict` prints, and prints the command that does."""
    phases = tmp_path / "phases.json"
    phases.write_text(json.dumps(gdlbench.Phases.synthetic("resnet50", 32).to_report()))
    req = gdlbench.PredictRequest(phases=str(phases), comm=gdlbench.CommSource(algo="ring", alpha=5.0, bandwidth="10"),
                                  strategy="wfbp", workers=(1, 16))
    assert req.command().startswith("gdlbench predict") and "--strategy wfbp" in req.command()
    ev = gdlbench.evaluate(req)
    assert isinstance(ev, gdlbench.Evaluation) and [r["workers"] for r in ev.rows] == [1, 16]
    one, sixteen = ev.rows
    assert sixteen["t_iter_us"] > one["t_iter_us"] > 0  # 16 workers pay for their all-reduce


@covers("memory_per_worker", "Memory")
def test_memory_per_worker():
    """ZeRO's model states: 16 bytes per parameter replicated (mixed precision Adam), sharded by stage."""
    net = gdlbench.load_network("gpt2-small:seq=128")
    zero = gdlbench.get_strategies("wfbp-fusion")[0]
    m = gdlbench.memory_per_worker(net, zero, 8, 2)
    assert isinstance(m, gdlbench.Memory) and m.model_states == pytest.approx(16 * net.params)
    z3 = gdlbench.memory_per_worker(net, gdlbench.get_strategies("zero3")[0], 8, 2)
    assert z3.model_states == pytest.approx(16 * net.params / 8) and z3.total < m.total
