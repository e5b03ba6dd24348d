"""Transformers as data: GPT-2 (small, medium), BERT-base, ViT-B/16 and a user's own decoder.

Each is built from the transformer layer types of gdlbench.nets.network; every layer of block i names
its block ("h.3", "encoder.layer.3"), the unit of activation checkpointing and of ZeRO-3/FSDP.
Parameter counts are exact against the reference implementations (tests/test_networks.py):
  gpt2-small   124,439,808  HF GPT2LMHeadModel ("gpt2"; lm_head tied to wte, 1024 positions)
  gpt2-medium  354,823,168  HF GPT2LMHeadModel ("gpt2-medium")
  bert-base    110,106,428  HF BertForPreTraining (bert-base-uncased): BertModel with its pooler,
                            109,482,240, plus the MLM head (decoder tied to the word embeddings) and
                            the next-sentence head. Without the pooler BertModel has 108,891,648.
  vit-b16       86,567,656  torchvision vit_b_16 (1000-class head)
Sequence length (seq; ViT: image and patch) and the shape of `transformer` are parameters:
`--net gpt2-small:seq=128`, `--net transformer:layers=4:hidden=256:heads=4:seq=128:vocab=1000`,
or a spec file {"name": "mine", "transformer": {"layers": 4, "hidden": 256, ...}} (expand()).
"""

from __future__ import annotations

from typing import Any

from ..common.errors import UsageError


def _block(layers: list[dict[str, Any]], p: str, x: str, hidden: int, heads: int, mlp: int, *, pre_ln: bool,
           causal: bool, dropout: float, eps: float, gelu_tanh: bool = False) -> str:
    """One encoder/decoder block named p; returns the name of its output. Pre-LN (GPT-2, ViT):
    x + attn(ln(x)), then + mlp(ln(.)). Post-LN (BERT): ln(x + attn(x)), then ln(. + mlp(.))."""
    def add(name: str, ltype: str, inputs: list[str] | None = None, **attrs: Any) -> str:
        layer: dict[str, Any] = {"name": f"{p}.{name}", "type": ltype, "block": p, **attrs}
        if inputs is not None:
            layer["inputs"] = inputs
        layers.append(layer)
        return f"{p}.{name}"

    def drop(name: str) -> None:
        if dropout > 0:
            add(name, "dropout", ratio=dropout)

    h = add("ln_1", "layernorm", [x], eps=eps) if pre_ln else x
    add("attn", "attention", [h], heads=heads, causal=causal, dropout=dropout)
    drop("attn.drop")
    r = add("add_1", "add", [layers[-1]["name"], x])
    if not pre_ln:
        r = add("ln_1", "layernorm", eps=eps)
    h = add("ln_2", "layernorm", [r], eps=eps) if pre_ln else r
    add("mlp.fc", "linear", [h], out_features=mlp)
    add("mlp.gelu", "gelu", approximate=gelu_tanh)
    add("mlp.proj", "linear", out_features=hidden)
    drop("mlp.drop")
    out = add("add_2", "add", [layers[-1]["name"], r])
    if not pre_ln:
        out = add("ln_2", "layernorm", eps=eps)
    return out


def gpt(name: str = "gpt", layers: int = 12, hidden: int = 768, heads: int = 12, seq: int = 1024,
        vocab: int = 50257, positions: int | None = None, mlp: int | None = None, tied: bool = True,
        dropout: float = 0.1, eps: float = 1e-5) -> dict[str, Any]:
    """A GPT-2-shaped decoder: token + position embedding, pre-LN blocks with causal attention and
    a GELU MLP (the tanh approximation, GPT-2's gelu_new), a final layer norm, the LM head (tied to
    the token table unless tied=False) and cross-entropy over the vocabulary at every position."""
    out: list[dict[str, Any]] = [
        {"name": "wte+wpe", "type": "embedding", "vocab": vocab, "hidden": hidden,
         "positions": positions or seq},
    ]
    if dropout > 0:
        out.append({"name": "drop", "type": "dropout", "ratio": dropout})
    x = out[-1]["name"]
    for i in range(layers):
        x = _block(out, f"h.{i}", x, hidden, heads, mlp or 4 * hidden, pre_ln=True, causal=True, dropout=dropout,
                   eps=eps, gelu_tanh=True)
    out += [{"name": "ln_f", "type": "layernorm", "inputs": [x], "eps": eps},
            {"name": "lm_head", "type": "lm_head", "vocab": vocab, "tied": tied},
            {"name": "loss", "type": "softmax_xent"}]
    return {"name": name, "input": [1, seq, 1], "layers": out,
            "description": f"GPT-2-shaped decoder: {layers} layers, hidden {hidden}, {heads} heads, "
                           f"sequence {seq}, vocabulary {vocab}" + ("" if tied else ", untied LM head"),
            "source": "Radford et al. 2019 (GPT-2); HF transformers GPT2LMHeadModel layout"}


def _gpt2(size: str, seq: int = 1024) -> dict[str, Any]:
    layers, hidden, heads, params = {"small": (12, 768, 12, 124_439_808),
                                     "medium": (24, 1024, 16, 354_823_168)}[size]
    spec = gpt(f"gpt2-{size}", layers, hidden, heads, seq, 50257, positions=1024)
    spec["description"] = f"GPT-2 {size} (tied LM head), sequence {seq} of 1024 positions"
    spec["published"] = {"params": params, "source": f"HF transformers GPT2LMHeadModel('gpt2{'' if size == 'small' else '-medium'}')"
                                                     f": {params:,} parameters (the LM head tied to wte)"}
    return spec


def bert_base(seq: int = 512) -> dict[str, Any]:
    """BERT-base as HF BertForPreTraining: embeddings (word, position, token type, LayerNorm),
    12 post-LN blocks, the pooler (first token, dense, tanh), the MLM head (dense, GELU,
    LayerNorm, decoder tied to the word embeddings with its own bias) and the NSP head."""
    hidden, eps, dropout = 768, 1e-12, 0.1
    layers: list[dict[str, Any]] = [
        {"name": "embeddings", "type": "embedding", "vocab": 30522, "hidden": hidden, "positions": 512,
         "token_types": 2},
        {"name": "embeddings.LayerNorm", "type": "layernorm", "eps": eps},
        {"name": "embeddings.dropout", "type": "dropout", "ratio": dropout},
    ]
    x = "embeddings.dropout"
    for i in range(12):
        x = _block(layers, f"encoder.layer.{i}", x, hidden, 12, 3072, pre_ln=False, causal=False, dropout=dropout,
                   eps=eps)
    layers += [
        {"name": "pooler.first", "type": "select_token", "inputs": [x]},
        {"name": "pooler.dense", "type": "linear", "out_features": hidden},
        {"name": "pooler.tanh", "type": "tanh"},
        {"name": "cls.predictions.transform.dense", "type": "linear", "inputs": [x], "out_features": hidden},
        {"name": "cls.predictions.transform.gelu", "type": "gelu"},
        {"name": "cls.predictions.transform.LayerNorm", "type": "layernorm", "eps": eps},
        {"name": "cls.predictions.decoder", "type": "lm_head", "vocab": 30522, "tied": True, "bias": True},
        {"name": "mlm_loss", "type": "softmax_xent"},
        {"name": "cls.seq_relationship", "type": "fc", "inputs": ["pooler.tanh"], "out_features": 2},
        {"name": "nsp_loss", "type": "softmax_xent"},
    ]
    return {"name": "bert-base", "input": [1, seq, 1], "layers": layers,
            "description": f"BERT-base for pre-training (MLM + NSP heads), sequence {seq} of 512 positions",
            "source": "Devlin et al., arXiv 1810.04805; HF transformers BertForPreTraining layout",
            "published": {"params": 110_106_428,
                          "source": "HF transformers BertForPreTraining('bert-base-uncased'): 110,106,428 "
                                    "parameters = BertModel with pooler 109,482,240 + MLM head 592,128 + "
                                    "decoder bias 30,522 + NSP head 1,538 (the '110M' of the paper)"}}


def vit(image: int = 224, patch: int = 16, layers: int = 12, hidden: int = 768, heads: int = 12, mlp: int = 3072,
        classes: int = 1000, name: str = "vit-b16") -> dict[str, Any]:
    """ViT as torchvision builds it: conv_proj (patch x patch, stride patch), class token and
    position embedding, pre-LN blocks (eps 1e-6, dropout 0), the final LayerNorm, the head on
    the class token."""
    if image % patch:
        raise UsageError(f"vit: patch {patch} must divide the image size {image}")
    out: list[dict[str, Any]] = [
        {"name": "conv_proj", "type": "conv", "out_channels": hidden, "kernel": patch, "stride": patch},
        {"name": "encoder.tokens", "type": "tokens"},
    ]
    x = "encoder.tokens"
    for i in range(layers):
        x = _block(out, f"encoder.layers.{i}", x, hidden, heads, mlp, pre_ln=True, causal=False, dropout=0.0,
                   eps=1e-6)
    out += [{"name": "encoder.ln", "type": "layernorm", "inputs": [x], "eps": 1e-6},
            {"name": "class_token", "type": "select_token"},
            {"name": "heads.head", "type": "fc", "out_features": classes},
            {"name": "loss", "type": "softmax_xent"}]
    spec: dict[str, Any] = {"name": name, "input": [3, image, image], "layers": out,
                            "description": f"ViT-B/{patch} (torchvision layout), {image}x{image} images, "
                                           f"{(image // patch) ** 2 + 1} tokens",
                            "source": "Dosovitskiy et al., arXiv 2010.11929; torchvision.models.vit_b_16"}
    if (image, patch, layers, hidden, mlp, classes) == (224, 16, 12, 768, 3072, 1000):
        spec["published"] = {"params": 86_567_656, "fwd_macs": 17.56e9,
                             "source": "torchvision model card (ViT_B_16_Weights.IMAGENET1K_V1): 86,567,656 "
                                       "params, 17.56 GFLOPS (multiply-adds) per 224x224 image"}
    return spec


# A user's transformer: the keys of a spec's "transformer" object and of `transformer:k=v:...`
TRANSFORMER_KEYS = ("layers", "hidden", "heads", "seq", "vocab", "positions", "mlp", "tied", "dropout")


def expand(spec: dict[str, Any], origin: str = "<dict>") -> dict[str, Any]:
    """A spec {"name", "transformer": {layers, hidden, heads, seq, vocab, ...}} as layers (gpt())."""
    shape = spec.get("transformer")
    if not isinstance(shape, dict):
        raise UsageError(f"{origin}: 'transformer' must be an object with {', '.join(TRANSFORMER_KEYS)}")
    extra = sorted(set(spec) - {"name", "transformer", "description", "source", "published"})
    if extra:
        raise UsageError(f"{origin}: a transformer spec has no {', '.join(extra)} (layers are built from it)")
    out = gpt(**{"name": spec.get("name", "transformer")} | _checked(shape, origin))
    return out | {k: spec[k] for k in ("description", "source", "published") if k in spec}


def _checked(shape: dict[str, Any], origin: str) -> dict[str, Any]:
    unknown = sorted(set(shape) - set(TRANSFORMER_KEYS))
    if unknown:
        raise UsageError(f"{origin}: unknown transformer key(s) {', '.join(map(str, unknown))} "
                         f"(known: {', '.join(TRANSFORMER_KEYS)})")
    missing = [k for k in ("layers", "hidden", "heads", "seq", "vocab") if k not in shape]
    if missing:
        raise UsageError(f"{origin}: the transformer needs {', '.join(missing)}")
    for k, v in shape.items():
        if k == "tied":
            if not isinstance(v, bool):
                raise UsageError(f"{origin}: transformer tied must be true or false, got {v!r}")
        elif k == "dropout":
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1:
                raise UsageError(f"{origin}: transformer dropout must be in [0, 1), got {v!r}")
        elif isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise UsageError(f"{origin}: transformer {k} must be an integer >= 1, got {v!r}")
    return dict(shape)


def _params(text: str, allowed: tuple[str, ...], origin: str) -> dict[str, Any]:
    """'k=v:k=v' (the part of a net name after its first ':') as keyword arguments."""
    out: dict[str, Any] = {}
    for item in text.split(":"):
        key, eq, value = item.partition("=")
        if not eq or key not in allowed:
            raise UsageError(f"--net {origin}: expected KEY=VALUE with KEY one of {', '.join(allowed)}, got {item!r}")
        if value in ("true", "false"):
            out[key] = value == "true"
            continue
        try:
            out[key] = float(value) if key == "dropout" else int(value)
        except ValueError:
            raise UsageError(f"--net {origin}: {key} must be a number, got {value!r}") from None
    return out


def with_params(name: str, text: str, origin: str | None = None) -> dict[str, Any]:
    """The spec of built-in `name` with the parameters of 'k=v:...' (load_network's NAME:k=v);
    errors name `origin` (what the user typed), by default NAME:TEXT."""
    origin = origin or f"{name}:{text}"
    if name == "transformer":
        kw = _checked(_params(text, TRANSFORMER_KEYS, origin), f"--net {origin}")
        return gpt(name="transformer", **kw)
    if name == "vit-b16":
        kw = _params(text, ("image", "patch"), origin)
        for k, v in kw.items():
            if isinstance(v, bool) or v < 1:
                raise UsageError(f"--net {origin}: {k} must be an integer >= 1, got {v!r}")
        return vit(**kw)
    seq = _params(text, ("seq",), origin).get("seq")
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
        raise UsageError(f"--net {origin}: seq must be an integer >= 1, got {seq!r}")
    if name == "bert-base":
        return bert_base(seq)
    return _gpt2(name.removeprefix("gpt2-"), seq)


NETS = {"gpt2-small": lambda: _gpt2("small"), "gpt2-medium": lambda: _gpt2("medium"), "bert-base": bert_base,
        "vit-b16": vit,
        "transformer": lambda: gpt("transformer", layers=2, hidden=256, heads=4, seq=128, vocab=1000)}
ALIASES = {"gpt2": "gpt2-small"}  # Hugging Face's name of GPT-2 small
PARAMETRISED = ("gpt2-small", "gpt2-medium", "bert-base", "vit-b16", "transformer")
