"""Networks as data: exact parameter counts, multiply-adds against published figures, shape
inference, the executor's layer_specs() contract, user nets, and bad specs."""

from __future__ import annotations

import json
import math

import pytest
from helpers import run_cli

from gdlbench.cli import main
from gdlbench.common.errors import UsageError
from gdlbench.nets.network import _pool_out, builtin_nets, load_network
from gdlbench.nets.transformer import ALIASES

PARAMS = {
    "alexnet": 60_965_224, "googlenet": 6_998_552, "googlenet-aux": 13_378_280, "resnet50": 25_557_032,
    "resnet101": 44_549_160, "resnet152": 60_192_808, "vgg16": 138_357_544,
}
# Published forward multiply-adds per image (sources in each net's spec "published.source").
MACS = {"alexnet": 0.724e9, "resnet50": 4.09e9, "resnet101": 7.80e9, "resnet152": 11.51e9, "vgg16": 15.47e9}


# Transformers (gdlbench/nets/transformer.py): HF GPT2LMHeadModel, HF BertForPreTraining,
# torchvision vit_b_16; "transformer" is the small default of a user's decoder.
TRANSFORMER_PARAMS = {"gpt2-small": 124_439_808, "gpt2-medium": 354_823_168, "bert-base": 110_106_428,
                      "vit-b16": 86_567_656}


def test_every_builtin_is_listed():
    assert set(builtin_nets()) == set(PARAMS) | set(TRANSFORMER_PARAMS) | {"transformer"}


@pytest.mark.parametrize("name", sorted(PARAMS))
def test_parameter_counts_are_exact(name):
    net = load_network(name)
    assert net.params == PARAMS[name] == net.published["params"]
    assert sum(s["params"] for s in net.layer_specs()) == net.params


@pytest.mark.parametrize("name", sorted(MACS))
def test_multiply_adds_within_2_percent_of_published(name):
    net = load_network(name)
    assert abs(net.fwd_macs / MACS[name] - 1) < 0.02, net.fwd_macs


def test_resnet50_is_about_4_1_gmacs():
    assert abs(load_network("resnet50").fwd_macs / 4.1e9 - 1) < 0.02


@pytest.mark.parametrize("name", ["googlenet", "googlenet-aux"])
def test_googlenet_macs_in_the_published_range(name):
    # Szegedy et al. give "around 1.5 billion"; the BVLC prototxt counts 1.58 G (conv + fc).
    assert 1.5e9 <= load_network(name).fwd_macs <= 1.6e9


def test_alexnet_shapes_and_groups():
    net = load_network("alexnet")
    assert net.input_shape == (3, 227, 227)
    assert net.layer("conv1").out_shape == (96, 55, 55)
    assert net.layer("pool1").out_shape == (96, 27, 27)
    conv2 = net.layer("conv2")
    assert conv2.param_shapes == ((256, 48, 5, 5), (256,)) and conv2.attrs["groups"] == 2
    assert net.layer("pool5").out_shape == (256, 6, 6)
    assert net.layer("fc6").param_shapes == ((4096, 9216), (4096,))
    assert net.layer("conv1").fwd_macs == 96 * 3 * 11 * 11 * 55 * 55


def test_googlenet_shapes():
    net = load_network("googlenet-aux")
    assert net.layer("pool1/3x3_s2").out_shape == (64, 56, 56)  # Caffe rounds up: 112 -> 56
    assert net.layer("inception_3a/output").out_shape == (256, 28, 28)
    assert net.layer("inception_4e/output").out_shape == (832, 14, 14)
    assert net.layer("inception_5b/output").out_shape == (1024, 7, 7)
    assert net.layer("loss1/ave_pool").out_shape == (512, 4, 4)
    assert net.layer("loss2/ave_pool").out_shape == (528, 4, 4)
    assert [lay.attrs["loss_weight"] for lay in net.layers if lay.type == "softmax_xent"] == [0.3, 0.3, 1.0]
    assert len(net.layer("inception_3a/output").inputs) == 4


def test_resnet50_shapes():
    net = load_network("resnet50")
    assert net.layer("maxpool").out_shape == (64, 56, 56)
    assert net.layer("layer1.0.add").out_shape == (256, 56, 56)
    assert net.layer("layer2.0.conv2").attrs["stride"] == [2, 2]  # torchvision v1.5: stride on the 3x3
    assert net.layer("layer4.2.relu").out_shape == (2048, 7, 7)
    assert net.layer("bn1").param_shapes == ((64,), (64,))
    assert sum(1 for lay in net.layers if lay.type == "conv") == 53


def test_caffe_ceil_mode_pooling():
    assert _pool_out(112, 3, 2, 0, True) == 56 and _pool_out(112, 3, 2, 0, False) == 55
    assert _pool_out(13, 3, 2, 0, True) == 6
    # a last window that would start inside the padding is dropped (Caffe's rule)
    assert _pool_out(5, 2, 2, 1, True) == 3
    assert _pool_out(6, 3, 4, 1, True) == 2


def test_layer_specs_contract():
    net = load_network("googlenet")
    specs = net.layer_specs()
    json.dumps(specs)  # plain data
    keys = {"name", "type", "inputs", "in_shapes", "out_shape", "attrs", "param_shapes", "params", "fwd_macs"}
    for i, s in enumerate(specs):
        assert set(s) == keys
        assert all(-1 <= j < i for j in s["inputs"])  # topological, -1 = data
        assert len(s["in_shapes"]) == len(s["inputs"])
        for j, shape in zip(s["inputs"], s["in_shapes"], strict=True):
            assert shape == (list(net.input_shape) if j < 0 else specs[j]["out_shape"])
        assert s["params"] == sum(math.prod(p) for p in s["param_shapes"])
        assert len(s["out_shape"]) == 3
    assert specs[0]["inputs"] == [-1]
    conv = specs[0]["attrs"]
    assert conv == {"out_channels": 64, "kernel": [7, 7], "stride": [2, 2], "pad": [3, 3], "dilation": [1, 1],
                    "groups": 1, "bias": True}


def test_gradient_messages_in_backward_order():
    net = load_network("alexnet")
    msgs = net.gradient_messages()
    assert [m.layer for m in msgs] == ["fc8", "fc7", "fc6", "conv5", "conv4", "conv3", "conv2", "conv1"]
    assert msgs[0].bytes == 4_097_000 * 4
    assert sum(m.bytes for m in msgs) == net.param_bytes() == 4 * 60_965_224
    assert [m.index for m in msgs] == sorted((m.index for m in msgs), reverse=True)


TINY = {
    "name": "tiny", "input": [3, 8, 8],
    "layers": [
        {"name": "c1", "type": "conv", "out_channels": 4, "kernel": 3, "pad": 1},
        {"name": "b1", "type": "bn"},
        {"name": "r1", "type": "relu"},
        {"name": "c2", "type": "conv", "inputs": ["data"], "out_channels": 2, "kernel": 1, "bias": False},
        {"name": "cat", "type": "concat", "inputs": ["r1", "c2"]},
        {"name": "p", "type": "avgpool", "kernel": 2},
        {"name": "lrn", "type": "lrn"},
        {"name": "d", "type": "dropout", "ratio": 0.25},
        {"name": "fc", "type": "fc", "out_features": 5},
        {"name": "loss", "type": "softmax_xent"},
    ],
}


def test_user_json_net(tmp_path):
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(TINY))
    net = load_network(str(path))
    assert net.layer("cat").out_shape == (6, 8, 8)
    assert net.layer("p").out_shape == (6, 4, 4) and net.layer("p").attrs["stride"] == [2, 2]
    assert net.params == (4 * 3 * 9 + 4) + 8 + 2 * 3 + (96 * 5 + 5)
    assert net.fwd_macs == 4 * 27 * 64 + 2 * 3 * 64 + 96 * 5
    assert net.layer("loss").out_shape == (1, 1, 1)


def test_user_python_net(tmp_path):
    path = tmp_path / "mine.py"
    path.write_text("def spec():\n    return " + repr(TINY).replace("True", "True") + "\n")
    assert load_network(str(path)).params == load_network(TINY).params


def test_cli_nets_lists_and_layers(tmp_path):
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(TINY))
    out = tmp_path / "layers.json"
    p = run_cli("nets", "--net", str(path), "--layers", "--json", str(out), "--csv", str(tmp_path / "l.csv"))
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    assert doc["command"] == "nets" and len(doc["rows"]) == len(TINY["layers"])
    assert doc["rows"][4]["layer"] == "cat" and doc["rows"][4]["inputs"] == [2, 3]
    assert (tmp_path / "l.csv").read_text().count("\n") == len(TINY["layers"]) + 1


def test_cli_nets_table(capsys):
    assert main(["nets"]) == 0
    out = capsys.readouterr().out
    for name in PARAMS:
        assert name in out
    assert "25,557,032" in out and "4.089" in out


def _bad(**change) -> dict:
    spec = json.loads(json.dumps(TINY))
    layer = change.pop("layer", None)
    if layer is not None:
        spec["layers"][layer[0]] = layer[1]
    spec.update(change)
    return spec


@pytest.mark.parametrize("spec, message", [
    (_bad(layer=(1, {"name": "b1", "type": "batchnorm"})), "unknown type 'batchnorm'"),
    (_bad(layer=(4, {"name": "cat", "type": "concat", "inputs": ["r1", "nope"]})), "input 'nope'"),
    (_bad(layer=(4, {"name": "cat", "type": "concat", "inputs": ["r1", "p"]})), "comes later"),
    (_bad(layer=(4, {"name": "cat", "type": "add", "inputs": ["r1", "c2"]})), "shape mismatch"),
    (_bad(layer=(3, {"name": "c2", "type": "conv", "inputs": ["data"], "out_channels": 2, "kernel": 1,
                     "stride": 2})), "shape mismatch"),
    (_bad(layer=(0, {"name": "c1", "type": "conv", "out_channels": 4, "kernel": 9})), "does not fit"),
    (_bad(layer=(0, {"name": "c1", "type": "conv", "out_channels": 4, "kernel": 3, "groups": 2})), "groups=2"),
    (_bad(layer=(0, {"name": "c1", "type": "conv", "kernel": 3})), "needs attribute 'out_channels'"),
    (_bad(layer=(0, {"name": "c1", "type": "conv", "out_channels": 4, "kernal": 3})), "unknown attribute"),
    (_bad(layer=(0, {"name": "c1", "type": "conv", "out_channels": -4, "kernel": 3})), "out_channels"),
    (_bad(layer=(0, {"name": "c1", "type": "conv", "out_channels": 4, "kernel": [3, 3, 3]})), "kernel"),
    (_bad(layer=(2, {"name": "c1", "type": "relu"})), "duplicate name"),
    (_bad(layer=(7, {"name": "d", "type": "dropout", "ratio": 1.5})), "ratio"),
    (_bad(layer=(5, {"name": "p", "type": "maxpool", "kernel": 2, "pad": 2})), "pad"),
    (_bad(layer=(4, {"name": "cat", "type": "concat", "inputs": ["r1"]})), "at least two inputs"),
    (_bad(layer=(4, {"name": "cat", "type": "concat", "inputs": ["r1", ["c2"]]})), "list of layer names"),
    (_bad(input=[3, 8]), "'input' must be"),
    (_bad(layers=[]), "'layers'"),
    (_bad(name=""), "'name'"),
    (_bad(extra=1), "unknown key"),
])
def test_bad_specs_are_usage_errors(spec, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace("[", r"\[")):
        load_network(spec)


def test_bad_files(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(UsageError, match="not valid JSON"):
        load_network(str(bad))
    with pytest.raises(UsageError, match="no such file"):
        load_network(str(tmp_path / "missing.json"))
    with pytest.raises(UsageError, match="unknown network 'nosuchnet'"):
        load_network("nosuchnet")
    empty = tmp_path / "empty.py"
    empty.write_text("X = 1\n")
    with pytest.raises(UsageError, match="SPEC"):
        load_network(str(empty))


def test_cli_bad_net_is_one_line_exit_2(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(_bad(layer=(1, {"name": "b1", "type": "bogus"}))))
    p = run_cli("nets", "--net", str(bad), "--layers")
    assert p.returncode == 2 and "unknown type 'bogus'" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr


def test_cli_layers_needs_net(capsys):
    assert main(["nets", "--layers"]) == 2
    assert "--layers needs --net" in capsys.readouterr().err


def test_fuzzed_specs_fail_only_with_usage_errors():
    """Whatever a user writes, loading either works or is a UsageError (never a traceback)."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from gdlbench.nets.network import LAYER_TYPES

    values = st.one_of(st.none(), st.booleans(), st.integers(-3, 300), st.floats(allow_nan=True),
                       st.text(max_size=3), st.lists(st.integers(-2, 9), max_size=3), st.dictionaries(
                           st.text(max_size=2), st.integers(), max_size=2))
    keys = st.sampled_from(["out_channels", "kernel", "stride", "pad", "dilation", "groups", "bias",
                            "out_features", "ceil_mode", "size", "alpha", "ratio", "loss_weight", "bogus"])
    layer = st.fixed_dictionaries(
        {"name": st.text(min_size=1, max_size=3), "type": st.one_of(st.sampled_from(LAYER_TYPES), values)},
        optional={"inputs": st.one_of(st.lists(st.sampled_from(["data", "a", "b", "c"]), max_size=3), values)},
    ).flatmap(lambda d: st.dictionaries(keys, values, max_size=4).map(lambda extra: {**extra, **d}))
    spec = st.fixed_dictionaries({"name": st.one_of(st.just("fuzz"), values),
                                  "input": st.one_of(st.just([3, 16, 16]), values),
                                  "layers": st.one_of(st.lists(layer, max_size=5), values)})

    @settings(max_examples=150, deadline=None)
    @given(spec)
    def check(s):
        try:
            net = load_network(s)
        except UsageError:
            return
        json.dumps(net.layer_specs())

    check()


def test_fuzzed_attribute_values_fail_only_with_usage_errors():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    values = st.one_of(st.none(), st.booleans(), st.integers(-3, 40), st.floats(allow_nan=True, allow_infinity=True),
                       st.text(max_size=3), st.lists(st.integers(-2, 12), max_size=3), st.just([3, 3]))
    keys = st.sampled_from(["out_channels", "kernel", "stride", "pad", "dilation", "groups", "bias", "out_features",
                            "ceil_mode", "size", "alpha", "ratio", "inputs", "type", "name"])

    @settings(max_examples=200, deadline=None)
    @given(st.integers(0, len(TINY["layers"]) - 1), keys, values)
    def check(i, key, value):
        spec = json.loads(json.dumps(TINY))
        spec["layers"][i][key] = value
        try:
            net = load_network(spec)
        except UsageError:
            return
        json.dumps(net.layer_specs())
        assert all(min(lay.out_shape) >= 1 for lay in net.layers)

    check()


def test_comment_keys_are_ignored():
    spec = json.loads(json.dumps(TINY))
    spec["_comment"] = "a note"
    spec["layers"][0]["#why"] = "the stem"
    assert load_network(spec).params == load_network(TINY).params


# ---------------------------------------------------------------------------------------------
# Transformers


@pytest.mark.parametrize("name", sorted(TRANSFORMER_PARAMS))
def test_transformer_parameter_counts_are_exact(name):
    net = load_network(name)
    assert net.params == TRANSFORMER_PARAMS[name] == net.published["params"]
    assert sum(s["params"] for s in net.layer_specs()) == net.params


def test_bert_body_is_hf_bertmodel_with_pooler():
    # HF BertModel (add_pooling_layer=True) is 109,482,240; the heads add 623,... to BertForPreTraining
    net = load_network("bert-base")
    names = [lay.name for lay in net.layers]
    body = net.layers[:names.index("pooler.tanh") + 1]
    assert sum(lay.params for lay in body) == 109_482_240
    assert sum(lay.params for lay in body if not lay.name.startswith("pooler")) == 108_891_648


def _gpt_macs(layers, d, s, v):
    # per layer: QKV 3 S D^2 + output S D^2 + MLP 8 S D^2, scores S^2 D and AV S^2 D; head S D V
    return layers * (12 * s * d * d + 2 * s * s * d) + s * d * v


@pytest.mark.parametrize("name, layers, d, seq", [("gpt2-small", 12, 768, 1024), ("gpt2-medium", 24, 1024, 1024),
                                                   ("gpt2-small:seq=128", 12, 768, 128)])
def test_gpt2_multiply_adds_are_exact(name, layers, d, seq):
    net = load_network(name)
    assert net.fwd_macs == _gpt_macs(layers, d, seq, 50257)
    assert net.input_shape == (1, seq, 1) and net.params == load_network(name.split(":")[0]).params


def test_vit_and_bert_multiply_adds():
    vit = load_network("vit-b16")
    s, d = 197, 768
    assert vit.fwd_macs == 768 * 768 * 196 + 12 * (12 * s * d * d + 2 * s * s * d) + 768 * 1000
    assert abs(vit.fwd_macs / 17.56e9 - 1) < 0.001  # torchvision's 17.56 GFLOPS (multiply-adds)
    bert = load_network("bert-base:seq=128")
    s = 128
    assert bert.fwd_macs == (12 * (12 * s * d * d + 2 * s * s * d) + d * d  # encoder, pooler
                             + s * d * d + s * d * 30522 + d * 2)  # MLM transform and decoder, NSP


def test_transformer_shapes_and_blocks():
    net = load_network("gpt2-small:seq=64")
    attn = net.layer("h.0.attn")
    assert attn.in_shapes == ((768, 64, 1),) and attn.out_shape == (768, 64, 1)
    assert attn.param_shapes == ((2304, 768), (2304,), (768, 768), (768,)) and attn.attrs["causal"] is True
    assert attn.fwd_macs == 64 * 768 * 2304 + 2 * 64 * 64 * 768 + 64 * 768 * 768
    assert net.layer("lm_head").out_shape == (50257, 64, 1) and net.layer("lm_head").params == 0
    assert {lay.block for lay in net.layers} == {""} | {f"h.{i}" for i in range(12)}
    assert net.layer("h.11.mlp.fc").block == "h.11" and net.layer("ln_f").block == ""
    vit = load_network("vit-b16")
    assert vit.layer("encoder.tokens").out_shape == (768, 197, 1)
    assert vit.layer("class_token").out_shape == (768, 1, 1)


def test_untied_head_and_users_transformer(tmp_path):
    tied = load_network("transformer:layers=2:hidden=64:heads=4:seq=16:vocab=100")
    untied = load_network("transformer:layers=2:hidden=64:heads=4:seq=16:vocab=100:tied=false")
    assert untied.params - tied.params == 100 * 64
    # per layer 12 D^2 + 13 D; embeddings (V + S) D; final LN 2D
    assert tied.params == 2 * (12 * 64 * 64 + 13 * 64) + (100 + 16) * 64 + 2 * 64
    spec = tmp_path / "mine.json"
    spec.write_text(json.dumps({"name": "mine", "transformer": {"layers": 2, "hidden": 64, "heads": 4, "seq": 16,
                                                                "vocab": 100}}))
    mine = load_network(str(spec))
    assert mine.name == "mine" and mine.params == tied.params and mine.fwd_macs == tied.fwd_macs


@pytest.mark.parametrize("text, message", [
    ("gpt2-small:seq=2048", "longer than positions 1024"),
    ("gpt2-small:seq=x", "seq must be a number"),
    ("gpt2-small:heads=3", "expected KEY=VALUE"),
    ("resnet50:seq=3", "only gpt2-small"),
    ("transformer:layers=2:hidden=64:heads=5:seq=16:vocab=100", "heads=5 must divide the width 64"),
    ("transformer:layers=2:hidden=64:seq=16:vocab=100", "needs heads"),
    ("transformer:layers=0:hidden=64:heads=4:seq=16:vocab=100", "layers must be an integer >= 1"),
    ("vit-b16:image=100", "patch 16 must divide"),
])
def test_bad_transformer_parameters(text, message):
    with pytest.raises(UsageError, match=message):
        load_network(text)


def test_bad_transformer_layers():
    base = {"name": "t", "input": [1, 8, 1], "layers": [
        {"name": "e", "type": "embedding", "vocab": 10, "hidden": 8, "positions": 8}]}
    head = {"name": "h", "type": "lm_head", "vocab": 11}
    with pytest.raises(UsageError, match="does not match the embedding"):
        load_network(base | {"layers": base["layers"] + [head]})
    with pytest.raises(UsageError, match="needs an embedding"):
        load_network({"name": "t", "input": [8, 4, 1], "layers": [head]})
    with pytest.raises(UsageError, match="'block' must be a string"):
        load_network(base | {"layers": [base["layers"][0] | {"block": 3}]})
    with pytest.raises(UsageError, match="takes token ids"):
        load_network(base | {"input": [3, 8, 1]})


def test_cli_nets_lists_transformers():
    p = run_cli("nets")
    assert p.returncode == 0, p.stderr
    assert "gpt2-small" in p.stdout and "124,439,808" in p.stdout and "86,567,656" in p.stdout


@pytest.mark.parametrize("shape, message", [
    ({"layers": 2, "hidden": 64, "heads": 4, "seq": 16}, "needs vocab"),
    ({"layers": 2, "hidden": 64, "heads": 4, "seq": 16, "vocab": 10, "depth": 3}, "unknown transformer key"),
    ({"layers": 2, "hidden": 64, "heads": 4, "seq": 16, "vocab": 10, "tied": 1}, "tied must be true or false"),
    ({"layers": 2, "hidden": 64, "heads": 4, "seq": 16, "vocab": 10, "dropout": 1.5}, "dropout must be in"),
    ({"layers": 2.5, "hidden": 64, "heads": 4, "seq": 16, "vocab": 10}, "layers must be an integer"),
    ("big", "'transformer' must be an object"),
])
def test_bad_transformer_shapes_are_usage_errors(shape, message):
    with pytest.raises(UsageError, match=message):
        load_network({"name": "mine", "transformer": shape})
    with pytest.raises(UsageError, match="has no layers"):
        load_network({"name": "mine", "transformer": {}, "layers": []})


def test_gpt2_is_gpt2_small_as_hugging_face_names_it():
    assert load_network("gpt2").layer_specs() == load_network("gpt2-small").layer_specs()
    assert load_network("gpt2:seq=64").input_shape == load_network("gpt2-small:seq=64").input_shape == (1, 64, 1)


@pytest.mark.parametrize("alias", sorted(ALIASES))
def test_an_alias_is_named_as_typed_in_errors(alias, capsys):
    """An error names what the user typed and what the alias stands for, not only the latter."""
    to = ALIASES[alias]
    for params, says in ((":seq=x", "seq must be a number"), (":seq=0", "seq must be an integer >= 1"),
                         (":foo=1", "expected KEY=VALUE")):
        with pytest.raises(UsageError) as err:
            load_network(alias + params)
        assert str(err.value).startswith(f"--net {alias}{params} (= {to}{params}): {says}"), err.value
    assert load_network(f"{alias}:seq=8").origin == f"{alias}:seq=8"  # reproduces as typed
    assert main(["iteration", "--net", f"{alias}:seq=x"]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"argument --net: {alias}:seq=x (= {to}:seq=x): seq must be a number" in line, line
    with pytest.raises(UsageError, match=f"; {alias} = {to};"):
        load_network(alias + "x")  # an unknown name lists the aliases too
