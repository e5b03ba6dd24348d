"""The study's report: one document built from the index (study.json), written as a
self-contained HTML page (images embedded as data URIs, no script, no network, readable on a
phone) and as Markdown with PNG files. Both come from the same blocks, so they hold the same
content. Every number is a `Num` that names the JSON field it shows (a JSON pointer into
study.json; in the HTML its `data-src`), so any number can be traced and checked: the cells' rows
the report shows beyond the analysis are copied into study.json's report.quoted (quote_cells)."""

from __future__ import annotations

import base64
import html
import io
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..common.paths import write_atomic
from . import plots
from .run import PHASE_GROUPS

# ---------------------------------------------------------------------------------------------
# Blocks


@dataclass
class Num:
    """A number shown as fmt.format(value * scale) + unit, taken from study.json at `src`."""

    value: float | None
    src: str
    fmt: str = "{:.1f}"
    scale: float = 1.0
    unit: str = ""

    def text(self) -> str:
        return "-" if self.value is None else self.fmt.format(self.value * self.scale) + self.unit


@dataclass
class Code:
    text: str


@dataclass
class Link:
    text: str
    anchor: str  # an id in the same document


Part = str | Num | Code | Link


@dataclass
class Heading:
    level: int
    text: str
    anchor: str = ""


@dataclass
class Para:
    parts: list[Part]


@dataclass
class Table:
    headers: list[str]
    rows: list[list[Part]]
    caption: str = ""


@dataclass
class Image:
    file: str  # relative to the study directory
    alt: str


@dataclass
class Commands:
    lines: list[str]


@dataclass
class Items:
    items: list[list[Part]]
    ordered: bool = False


@dataclass
class Details:
    """Folded away: the summary shows, the lines (commands) open on a click."""

    summary: str
    lines: list[str]


Block = Heading | Para | Table | Image | Commands | Items | Details


@dataclass
class Doc:
    title: str
    blocks: list[Block] = field(default_factory=list)

    def add(self, *blocks: Block) -> None:
        self.blocks.extend(blocks)


# ---------------------------------------------------------------------------------------------
# Renderers


def _html_parts(parts: list[Part]) -> str:
    out = []
    for p in parts:
        if isinstance(p, Num):
            out.append(f'<span class="n" data-src="{html.escape(p.src)}" data-scale="{p.scale:g}">'
                       f"{html.escape(p.text())}</span>")
        elif isinstance(p, Code):
            out.append(f"<code>{html.escape(p.text)}</code>")
        elif isinstance(p, Link):
            out.append(f'<a href="#{html.escape(p.anchor)}">{html.escape(p.text)}</a>')
        else:
            out.append(html.escape(p))
    return "".join(out)


PHONE_ZOOM = 1.35  # 8 pt at 110 dpi is 12.2 px: x 1.35 = 16.5 px, the body's 16 px or more
CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;line-height:1.45;color:#1b1b1b;
 max-width:62rem;margin:0 auto;padding:0.8rem;background:#fff}
h1{font-size:1.5rem}h2{font-size:1.25rem;border-bottom:1px solid #ddd;padding-bottom:.2rem;margin-top:2rem}
h3{font-size:1.08rem;margin-top:1.4rem}
img{max-width:100%;height:auto;display:block;margin:.6rem 0}
.t{overflow-x:auto;-webkit-overflow-scrolling:touch;margin:.6rem 0;
 background:linear-gradient(to right,#fff 30%,rgba(255,255,255,0)),linear-gradient(to right,rgba(255,255,255,0),#fff 70%) 100% 0,
 radial-gradient(farthest-side at 0 50%,rgba(0,0,0,.3),rgba(0,0,0,0)),radial-gradient(farthest-side at 100% 50%,rgba(0,0,0,.3),rgba(0,0,0,0)) 100% 0;
 background-repeat:no-repeat;background-size:40px 100%,40px 100%,16px 100%,16px 100%;background-attachment:local,local,scroll,scroll}
.cue{display:none;font-size:.8rem;color:#555;margin:.2rem 0 0}
.fig{overflow-x:auto;-webkit-overflow-scrolling:touch}
details{margin:.4rem 0}summary{cursor:pointer;color:#1a4f8a}
.box{border:2px solid #1a4f8a;border-radius:6px;padding:.2rem .8rem;margin:1rem 0;background:#f5f9fd}
@media (max-width:40rem){.cue{display:block}.fig img{max-width:none;width:var(--w,62rem)}}
table{border-collapse:collapse;font-size:.9rem}
th,td{border:1px solid #ddd;padding:.25rem .5rem;text-align:right;white-space:nowrap}
.l{text-align:left}td.w{white-space:normal;min-width:14rem}.kv td{white-space:normal;overflow-wrap:anywhere}.kv td:first-child{white-space:nowrap}
caption{caption-side:bottom;text-align:left;font-size:.8rem;color:#555;padding-top:.3rem}
code{font-size:.85rem;background:#f4f4f4;padding:0 .2rem;border-radius:3px;overflow-wrap:anywhere}
pre{background:#f4f4f4;padding:.6rem;overflow-x:auto;font-size:.8rem;white-space:pre-wrap;overflow-wrap:anywhere}
li{margin:.3rem 0}
"""


def render_html(doc: Doc, root: Path) -> str:
    out = ['<!DOCTYPE html>', '<html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>{html.escape(doc.title)}</title><style>{CSS}</style></head><body>",
           f"<h1>{html.escape(doc.title)}</h1>"]
    for b in doc.blocks:
        if isinstance(b, Heading):
            anchor = f' id="{html.escape(b.anchor)}"' if b.anchor else ""
            out.append(f"<h{b.level}{anchor}>{html.escape(b.text)}</h{b.level}>")
        elif isinstance(b, Para):
            out.append(f"<p>{_html_parts(b.parts)}</p>")
        elif isinstance(b, Table):
            # numbers right, words left (as the CLI's tables)
            # long words columns (a list of tied strategies, a why) wrap, at a readable width
            cls = ["" if any(isinstance(row[i], Num) for row in b.rows) else
                   ' class="l w"' if max((len(c) for c in (row[i] for row in b.rows) if isinstance(c, str)), default=0) > 40 else
                   ' class="l"' for i in range(len(b.headers))]
            head = "".join(f"<th{c}>{html.escape(h)}</th>" for c, h in zip(cls, b.headers, strict=True))
            body = "".join("<tr>" + "".join(f"<td{c}>{_html_parts([x])}</td>" for c, x in zip(cls, row, strict=True))
                           + "</tr>" for row in b.rows)
            cap = f"<caption>{html.escape(b.caption)}</caption>" if b.caption else ""
            thead = f"<thead><tr>{head}</tr></thead>" if any(b.headers) else ""
            kind = "kv" if not any(b.headers) else ""
            cue = '<p class="cue">&#8596; the table scrolls sideways</p>' if len(b.headers) > 4 else ""
            out.append(f'{cue}<div class="t"><table class="{kind}">{cap}{thead}<tbody>{body}</tbody></table></div>')
        elif isinstance(b, Image):
            raw = (root / b.file).read_bytes()
            data = base64.b64encode(raw).decode()
            # on a phone the chart is drawn PHONE_ZOOM x its pixel width (scrolling sideways), so
            # that its 8 pt labels (at the figures' 110 dpi) are at least the body's 16 px
            width = int.from_bytes(raw[16:20], "big") if raw[:8] == b"\x89PNG\r\n\x1a\n" else 0
            style = f' style="--w:{round(width * PHONE_ZOOM)}px"' if width else ""
            out.append(f'<p class="cue">&#8596; the chart scrolls sideways</p><div class="fig"><img alt="{html.escape(b.alt)}"{style} '
                       f'src="data:image/png;base64,{data}"></div>')
        elif isinstance(b, Commands):
            out.append("<pre>" + html.escape("\n".join(b.lines)) + "</pre>")
        elif isinstance(b, Items):
            tag = "ol" if b.ordered else "ul"
            out.append(f"<{tag}>" + "".join(f"<li>{_html_parts(i)}</li>" for i in b.items) + f"</{tag}>")
        elif isinstance(b, Details):
            out.append(f"<details><summary>{html.escape(b.summary)}</summary><pre>"
                       + html.escape("\n".join(b.lines)) + "</pre></details>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _md_parts(parts: list[Part], cell: bool = False) -> str:
    out = []
    for p in parts:
        if isinstance(p, Num):
            out.append(p.text())
        elif isinstance(p, Code):
            out.append(f"`{p.text}`")
        elif isinstance(p, Link):
            out.append(f"[{p.text}](#{p.anchor})")
        else:
            out.append(p)
    text = "".join(out)
    return text.replace("|", "\\|") if cell else text


def render_markdown(doc: Doc) -> str:
    out = [f"# {doc.title}", ""]
    for b in doc.blocks:
        if isinstance(b, Heading):
            out += ([f'<a id="{b.anchor}"></a>', ""] if b.anchor else []) + ["#" * b.level + " " + b.text, ""]
        elif isinstance(b, Para):
            out += [_md_parts(b.parts), ""]
        elif isinstance(b, Table):
            out.append("| " + " | ".join(b.headers) + " |")
            out.append("|" + "|".join("---" for _ in b.headers) + "|")
            out += ["| " + " | ".join(_md_parts([c], cell=True) for c in row) + " |" for row in b.rows]
            out += ([f"_{b.caption}_"] if b.caption else []) + [""]
        elif isinstance(b, Image):
            out += [f"![{b.alt}]({b.file})", ""]
        elif isinstance(b, Commands):
            out += ["```bash", *b.lines, "```", ""]
        elif isinstance(b, Items):
            out += [(f"{i + 1}. " if b.ordered else "- ") + _md_parts(item) for i, item in enumerate(b.items)] + [""]
        elif isinstance(b, Details):
            out += ["<details><summary>" + html.escape(b.summary) + "</summary>", "", "```bash", *b.lines, "```", "",
                    "</details>", ""]
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# The study's document


_NETS = "/analysis/nets"


def _ms(value: float | None, src: str, digits: int = 1) -> Num:
    return Num(value, src, f"{{:.{digits}f}}", 1e-3, " ms")


def _pct(value: float | None, src: str, signed: bool = True) -> Num:
    return Num(value, src, "{:+.1f}" if signed else "{:.1f}", 1.0, " %")


def _ips(value: float | None, src: str) -> Num:
    return Num(value, src, "{:,.1f}" if value is not None and value < 1e4 else "{:,.0f}")


def build_document(index: Mapping[str, Any], quoted: Mapping[str, Any]) -> Doc:
    """The report's blocks from the index and the rows it quotes from the cells (quote_cells)."""
    cfg, an, env, prov = index["config"], index["analysis"], index.get("env", {}), index.get("provenance", {})
    n_meas = cfg["world_size"]
    doc = Doc(f"gdlbench study: {', '.join(cfg['nets'])} on {n_meas} rank(s), {cfg['device']}")
    _intro(doc, cfg, n_meas)
    _contents(doc, cfg, quoted, an.get("validation"))
    _headline(doc, an)
    _scope(doc, an, cfg)
    _verdicts(doc, an)
    _how_to_read(doc)
    _strategies(doc, an)
    _provenance(doc, index, cfg, env, prov)
    _fit(doc, an)
    _bandwidth(doc, an, quoted["bandwidth"])
    val = an.get("validation")
    for net in cfg["nets"]:
        _net_section(doc, net, an["nets"][net], cfg, quoted["nets"][net], val if val and val["net"] == net else None)
    doc.add(Heading(2, "Notes", "notes"))
    doc.add(Items([[n] for n in an.get("notes", [])]))
    return doc


def _intro(doc: Doc, cfg: Mapping[str, Any], n_meas: int) -> None:
    """What the study measured and what it predicted from, in one paragraph."""
    doc.add(Para([f"{len(cfg['nets'])} networks x {len(cfg['strategies'])} strategies ({', '.join(cfg['strategies'])}). "
                  f"Measured here on {n_meas} worker(s); predicted for {', '.join(map(str, cfg['workers']))} workers "
                  "from the phases measured here and "
                  + (f"the link given on the command line ({cfg['link']} us:GB/s)." if cfg.get("link") else
                     f"the two-level cluster of {cfg['cluster']}." if cfg.get("cluster") else
                     f"the two-level alpha-beta fit of this machine's all-reduce across {cfg['nodes']} nodes "
                     "(inside a node and between nodes)." if cfg.get("nodes", 1) > 1 else
                     "the alpha-beta fit of this machine's all-reduce.")
                  + (" Quick mode: batch 1 and few iterations, to check the pipeline, not to quote."
                     if cfg.get("quick") else "")]))


def _contents(doc: Doc, cfg: Mapping[str, Any], quoted: Mapping[str, Any], v: Mapping[str, Any] | None) -> None:
    """The table of contents, linked to every section."""
    toc = [("Headline", "headline"), ("What was measured, what is assumed", "scope"), ("Verdicts", "verdicts"),
           ("How to read this report", "how-to-read"), ("The strategies", "strategies"),
           ("Machine, versions and how to reproduce", "provenance"), ("Communication fit", "fit"),
           *([("All-reduce bandwidth by message size", "bandwidth")] if quoted["bandwidth"] else []),
           *(entry for net in cfg["nets"] for entry in ((net, net), (f"{net}: slowest layers and messages",
                                                                       f"{net}-slowest"))),
           *([(f"{v['net']}: validation on {v['shape']}", f"{v['net']}-validation")] if v else []),
           ("Notes", "notes")]
    doc.add(Heading(2, "Contents", "contents"))
    doc.add(Items([[Link(t, a)] for t, a in toc], ordered=True))


def _verdicts(doc: Doc, an: Mapping[str, Any]) -> None:
    """Per net and scale: the winner, its margin over the runner-up with its noise band, and why."""
    doc.add(Heading(2, "Verdicts", "verdicts"))
    doc.add(Para(["Per net and scale: the strategy that wins (highest images/s), by how much over the next (the "
                  "margin, with its noise band), and why: the phase group (I/O = read + copy; compute = forward + "
                  "backward; communication = exposed, not hidden behind backward; update) where the runner-up "
                  "loses the most time. Rows marked measured come from the composed runs here: a margin under ",
                  Num(an.get("tie_se", 2.0), "/analysis/tie_se", "{:g}"),
                  " x the combined standard error of the two medians over the rounds is a tie. Rows marked "
                  "predicted come from the model: their band is the model's |error| at the measured scale for "
                  "the two strategies, added, and a margin inside it is a tie. A margin over twice its threshold "
                  "is robust. Parameter-server rows say how many servers they were priced with."]))
    rows = []
    for net, na in an["nets"].items():
        for i, v in enumerate(na["verdicts"]):
            p = f"/analysis/nets/{net}/verdicts/{i}"
            winner = (", ".join(v["tied"]) + " (tied)") if v.get("state") == "tie" else v["winner"]
            if v.get("leans_on_failed"):  # a prediction resting on a component that did not validate
                winner += " [leans on " + "; ".join(f"{s}: {', '.join(c)}" for s, c in v["leans_on_failed"].items()) + "]"
            who = "winner" if "winner_servers" in v else "runner_up" if "runner_up_servers" in v else None
            servers = (_servers_label(v[f"{who}_servers"], v[f"{who}_servers_assumption"]) if who else "-")
            rows.append([net, Num(v["workers"], f"{p}/workers", "{:.0f}"), v["source"], v.get("state", "winner"),
                         winner, _ips(v["winner_images_per_s"], f"{p}/winner_images_per_s"),
                         v["runner_up"] or "-", _pct(v["margin_pct"], f"{p}/margin_pct"),
                         Num(v.get("margin_band_pct"), f"{p}/margin_band_pct", "± {:.1f}", 1.0, " %"),
                         _why_text(v), servers, f"{v['bound_by']}",
                         _pct(v["comm_exposed_pct"], f"{p}/comm_exposed_pct", signed=False),
                         _fits_text(na.get("memory"), v["workers"])])
    shaped = any((na.get("memory") or {}).get("at") for na in an["nets"].values())
    doc.add(Table(["net", "N", "from", "verdict", "winner", "images/s", "runner-up", "margin", "band", "why",
                   "PS servers", "bound by", "comm exposed", "memory: fastest that fits (lowest ZeRO stage)"
                   + (", at the target shape" if shaped else "")], rows,
                  "margin: how much longer the runner-up's iteration is; band: the tie threshold (noise when "
                  "measured, the model's error when predicted); why: the phase group where the runner-up loses "
                  "the most, runner-up against winner; PS servers: how many parameter servers the winner (or runner-up) "
                  "is priced with, and whether that is assumed; shares of the winner's iteration; [leans on ...]: "
                  "a predicted verdict whose strategies rest on a component that did not validate at the measured "
                  "scale (the net's component table); memory: of the "
                  "study's and the sharded strategies, the fastest whose memory per worker fits the device "
                  "(gdlbench.model.memory; the net's section has the table), the lowest ZeRO stage that fits (the "
                  "cheapest in communication) and which fit"
                  + ("; at the target shape (--memory-at): the memory is modelled at the job's shape, the "
                     "verdict's time is measured at the study's smaller one" if shaped else "")))


def _fits_text(mem: Mapping[str, Any] | None, n: int, long: bool = False) -> str:
    """The memory answer at n workers: the fastest strategy that fits, the lowest ZeRO stage that
    fits (the cheapest in communication) and which fit; with --memory-at, at which shape."""
    if not mem:
        return "-"
    at = mem.get("at")
    where = f"at {_shape_text(mem)}: " if at else ""
    best, low = mem["fastest_that_fits"].get(str(n)), mem["lowest_stage_that_fits"].get(str(n))
    if not best or not low:
        return f"{where}nothing fits in {mem['limit_bytes'] / 1e9:g} GB"
    every = [r for r in mem["rows"] if r["workers"] == n]
    fit = [r["strategy"] for r in every if r["fits"]]
    which = "all fit" if len(fit) == len(every) else "fit: " + ", ".join(fit)
    if long:
        return (f"{where}the fastest that fits is {best}; the cheapest that fits (lowest ZeRO stage) is stage "
                f"{low['stage']} ({low['strategy']}); {which}")
    return f"{where}{best} (stage {low['stage']}: {low['strategy']}); {which}"


def _shape_text(mem: Mapping[str, Any]) -> str:
    """The shape the memory answer is modelled at: 'gpt2-medium:seq=1024, batch 16, mixed'."""
    at = mem["at"]
    return (f"{at['net']}, batch {at['batch']}, {mem['precision']}"
            + (", activation checkpointing" if mem.get("checkpointing") else ""))


def _how_to_read(doc: Doc) -> None:
    """Where the answer is, where each number comes from, how to rerun a what-if."""
    doc.add(Heading(2, "How to read this report", "how-to-read"))
    doc.add(Items([["Headline and verdicts (above): the answer. A verdict is a tie when the margin is inside the "
                    "noise of the measurement (or the model's error, at a scale not measured); the headline lists "
                    "only the margins well outside it. Then, per net: ",
                    "the measured iteration against the model (the model is only worth its predictions where it "
                    "matches what was measured), the measured timeline of one iteration per strategy, the scaling "
                    "curves (the shaded region is the model alone), and the what-ifs ranked by predicted gain."],
                   ["Every number comes from ", Code("study.json"), " (in the HTML each number's ",
                    Code("data-src"), " names its field); the measurements themselves are in ", Code("cells/"),
                    " in the JSON shape every gdlbench command writes."],
                   ["Each what-if carries the ", Code("gdlbench predict"),
                    " command that computes it (folded under its table): run it in the study's directory to get "
                    "the same number."]]))

def _servers_label(servers: int, assumption: str) -> str:
    """A parameter-server row's server count and its ground, in a few words."""
    return f"{servers} servers, assumed = workers" if "assumed" in assumption else f"{servers} servers, fixed"


def _why_text(v: Mapping[str, Any]) -> str:
    w = v.get("why")
    if not w or v.get("runner_up") is None:
        return "-"
    return (f"{w['group']}: {w['difference_us'] / 1e3:+.1f} ms ({w['runner_up_us'] / 1e3:.1f} against "
            f"{w['winner_us'] / 1e3:.1f} ms)")


def _headline(doc: Doc, an: Mapping[str, Any]) -> None:
    doc.add(Heading(2, "Headline", "headline"))
    robust: list[list[Part]] = []
    ties: list[str] = []
    for net, na in an["nets"].items():
        for i, v in enumerate(na["verdicts"]):
            p = f"/analysis/nets/{net}/verdicts/{i}"
            if v.get("state") == "robust":
                robust.append([f"{net}, N = {v['workers']} ({v['source']}): {v['winner']} beats {v['runner_up']} by ",
                               _pct(v["margin_pct"], f"{p}/margin_pct"), " (noise band ",
                               Num(v["margin_band_pct"], f"{p}/margin_band_pct", "± {:.1f}", 1.0, " %"), "); ",
                               _why_text(v)])
            elif v.get("state") == "tie":
                ties.append(f"{net} N = {v['workers']} ({', '.join(v['tied'])})")
    if robust:
        doc.add(Para(["Robust findings (a margin more than twice its noise band):"]))
        doc.add(Items(robust))
    else:
        doc.add(Para(["No robust finding: no verdict wins by more than twice its noise band."]))
    if ties:
        doc.add(Para(["Ties (the margin is inside the noise: on this evidence the tied strategies are equally "
                      "good there):"]))
        doc.add(Items([[t] for t in ties]))


def _scope(doc: Doc, an: Mapping[str, Any], cfg: Mapping[str, Any]) -> None:
    sc = an.get("scope")
    if not sc:
        return
    doc.add(Heading(2, "What was measured, what is assumed", "scope"))
    fit = (f"{sc['fit_min_bytes']:,} to {sc['fit_max_bytes']:,} bytes" if sc.get("fit_min_bytes") else "no fit here")
    rows: list[list[Part]] = [
        ["measured", f"{sc['device']} on {sc['ranks']} rank(s), {sc['nodes']} node(s); {sc['rounds']} timed rounds "
                     f"after {sc['warmup']} warm-up; every verdict at N = {sc['measured_workers']} is measured"],
        ["link", sc["link"]], ["fit range", f"message sizes {fit}"],
        ["extrapolated", f"every N other than {sc['measured_workers']}, up to {sc['largest_predicted_workers']:,} "
                         "workers (shaded in the scaling charts)"],
        *(["assumed", a] for a in sc["assumed"])]
    v = an.get("validation")
    rows.append(["beyond the measured scale",
                 Link(f"{v['net']} measured on {v['shape']} against the model's prediction for it (its table)",
                      f"{v['net']}-validation") if v else
                 "not validated: no run on more nodes given (gdlbench study --validate; scripts/study-validate.sh)"])
    doc.add(Table(["", ""], rows, "the predictions are only as good as these assumptions"))


def _strategies(doc: Doc, an: Mapping[str, Any]) -> None:
    if not an.get("strategies"):
        return
    doc.add(Heading(2, "The strategies", "strategies"))
    doc.add(Para(["What each strategy does, as the model prices it, and where its description comes from "
                  "(gdlbench/model/strategies.py)."]))
    items: list[list[Part]] = []
    for st in an["strategies"]:
        extra = f" Servers: {st['servers_assumption']}." if "servers_assumption" in st else ""
        items.append([Code(st["name"]), f": {st['describe']}. {st['assumptions']}{extra} Source: {st['source']}."])
    doc.add(Items(items))


def _provenance(doc: Doc, index: Mapping[str, Any], cfg: Mapping[str, Any], env: Mapping[str, Any],
                prov: Mapping[str, Any]) -> None:
    doc.add(Heading(2, "Machine, versions and how to reproduce", "provenance"))
    items = [("CPU", f"{env.get('cpu', '?')}, {env.get('cpu_cores', '?')} usable cores"),
             ("platform", env.get("platform", "?")), ("Python", env.get("python", "?")),
             ("MPI", env.get("mpi", "?")), ("BLAS", env.get("blas", "?")),
             ("GPU", env.get("gpu", "see devices") if "gpu" in env else
              ", ".join(d.get("name", "?") for d in env.get("devices", []) if d.get("kind") == "cuda")),
             ("gdlbench", index.get("version", "?")),
             ("launch", f"{prov.get('launcher', '?')}, {prov.get('world_size', '?')} rank(s), host "
                        f"{prov.get('host', '?')}, started {prov.get('started_utc', '?')}"),
             ("threads", f"{env.get('default_threads', '?')} compute threads per rank by default"
                         + (f"; --threads {cfg['threads']}" if cfg.get("threads") else ""))]
    if index.get("resumes"):
        items.append(("resumed", ", ".join(r["utc"] for r in index["resumes"])))
    doc.add(Table(["", ""], [[k, v] for k, v in items]))
    doc.add(Para(["The study, as it was run (", Code("--resume DIR"), " continues it where it stopped):"]))
    doc.add(Commands([prov.get("command", "gdlbench study")]))
    doc.add(Para(["Each measurement on its own, run in the study's directory (each writes the JSON in ",
                  Code("cells/"), " that the report reads):"]))
    doc.add(Commands([c["command"] for c in index["cells"]]))
    rows = [[c["name"], c["state"] + (" (kept from an earlier run)" if c.get("kept_from_earlier_run") else ""),
             Num(c.get("seconds"), f"/cells/{i}/seconds", "{:.0f}", 1.0, " s"), Code(c["json"])]
            for i, c in enumerate(index["cells"])]
    doc.add(Table(["cell", "state", "time", "JSON"], rows))


def _fit(doc: Doc, an: Mapping[str, Any]) -> None:
    doc.add(Heading(2, "Communication: the alpha-beta fit and the encode cost", "fit"))
    if an.get("fit"):
        rows = []
        for i, f in enumerate(an["fit"]):
            p = f"/analysis/fit/{i}"
            rows.append([f["algo"], Num(f["alpha_us"], f"{p}/alpha_us", "{:.2f}", 1.0, " us"),
                         Num(f["link_gbs"], f"{p}/link_gbs", "{:.2f}", 1.0, " GB/s"),
                         Num(f["median_rel_error"], f"{p}/median_rel_error", "{:.1f}", 100.0, " %"),
                         Num(f["regimes"], f"{p}/regimes", "{:.0f}")])
        doc.add(Table(["algorithm", "alpha (largest regime)", "1/beta", "median |error|", "regimes"], rows,
                      "fitted by `gdlbench allreduce --fit` on this machine's ranks (cells/allreduce-fit.json); "
                      "the library fit prices the all-reduce strategies, ps the parameter-server ones; "
                      "reduce_scatter and allgather (`gdlbench reduce_scatter --fit`, `allgather --fit`, where a "
                      "sharded strategy was measured) the sharded strategies' messages"))
    else:
        doc.add(Para(["No fit: the predictions use the link given with --link or the cluster of --cluster."]))
    c = an["compress"]
    doc.add(Para(["Top-k compression at ratio ", Num(c["ratio"], "/analysis/compress/ratio", "{:g}"),
                  " (k = n/(2r) values kept as index + value): encode ",
                  Num(c["encode_us_per_byte"], "/analysis/compress/encode_us_per_byte", "{:.3f}", 1e3, " ns"),
                  " per dense byte, measured by ", Code("gdlbench compress"), " (cells/compress.json)."]))


def _bandwidth(doc: Doc, an: Mapping[str, Any], rows: list[dict[str, Any]]) -> None:
    """The fit cell's all-reduce rows as nccl-tests prints them, per algorithm, beside its fit line."""
    if not rows:
        return
    base = "/report/quoted/bandwidth"
    doc.add(Heading(3, "All-reduce bandwidth by message size", "bandwidth"))
    doc.add(Para(["What the fit above was fitted to: each size's median time over the timed runs, as ",
                  Code("gdlbench allreduce"), " (and nccl-tests) prints it: algbw = size / time, busbw = algbw x "
                  "2(N-1)/N (the bytes each rank's link carries); fit: the time the fitted line gives at that size "
                  "(rows of cells/allreduce-fit.json)."]))
    fits = {f["algo"]: i for i, f in enumerate(an.get("fit") or [])}
    for algo in dict.fromkeys(r["algo"] for r in rows):
        mine = [(k, r) for k, r in enumerate(rows) if r["algo"] == algo]
        line: list[Part] = [Code(algo)]
        if algo in fits:
            p = f"/analysis/fit/{fits[algo]}"
            f = an["fit"][fits[algo]]
            line += [": fit line alpha = ", Num(f["alpha_us"], f"{p}/alpha_us", "{:.2f}", 1.0, " us"), ", beta = ",
                     Num(f["beta_us_per_byte"], f"{p}/beta_us_per_byte", "{:.4f}", 1e3, " ns/B"), " (1/beta = ",
                     Num(f["link_gbs"], f"{p}/link_gbs", "{:.2f}", 1.0, " GB/s"), ") in its largest regime"]
        doc.add(Para([*line, f" ({mine[0][1]['nranks']} ranks, {mine[0][1]['dtype']}, sum):"]))
        doc.add(Table(["size (B)", "count", "time (us)", "algbw", "busbw", "fit (us)"],
                      [[Num(r["size_bytes"], f"{base}/{k}/size_bytes", "{:,.0f}"),
                        Num(r["count"], f"{base}/{k}/count", "{:,.0f}"),
                        Num(r["time_us"], f"{base}/{k}/time_us", "{:,.1f}"),
                        Num(r["algbw_gbs"], f"{base}/{k}/algbw_gbs", "{:.3f}"),
                        Num(r["busbw_gbs"], f"{base}/{k}/busbw_gbs", "{:.3f}"),
                        Num(r["fit_us"], f"{base}/{k}/fit_us", "{:,.1f}")]
                       for k, r in mine], f"count: {mine[0][1]['dtype']} elements; algbw and busbw in GB/s"))


def _net_section(doc: Doc, net: str, na: Mapping[str, Any], cfg: Mapping[str, Any],
                 slowest: Mapping[str, Any], validation: Mapping[str, Any] | None = None) -> None:
    base = f"{_NETS}/{net}"
    doc.add(Heading(2, f"{net}: batch {na['batch']} per worker", net))
    n = na["measured_workers"]
    doc.add(Heading(3, f"Measured on {n} worker(s) against the model"))
    _compare_table(doc, base, na)
    _components(doc, base, na)
    if validation:
        _validation(doc, validation, n)
    doc.add(Image(f"img/breakdown-{net}.png", f"{net}: phase breakdown per strategy, measured and predicted"))
    _timeline(doc, net, na)
    _slowest(doc, net, slowest)
    _scaling(doc, net, na, cfg["scales"], n)
    _memory(doc, net, na, cfg["scales"])
    _what_ifs(doc, net, na, cfg["scales"])


def _compare_table(doc: Doc, base: str, na: Mapping[str, Any]) -> None:
    """The measured iteration per strategy against the model's two predictions."""
    rows = []
    for i, c in enumerate(na["compare"]):
        p = f"{base}/compare/{i}"
        name = c["strategy"] + (f" ({_servers_label(c['servers'], c['servers_assumption'])})" if "servers" in c else "")
        rows.append([name, _ms(c["measured_us"], f"{p}/measured_us"),
                     Num(c.get("measured_se_us"), f"{p}/measured_se_us", "± {:.1f}", 1e-3, " ms"),
                     _ms(c["predicted_us"], f"{p}/predicted_us"), _pct(c["error_pct"], f"{p}/error_pct"),
                     Num(c.get("error_se_pct"), f"{p}/error_se_pct", "± {:.1f}", 1.0, " %"),
                     _ms(c["model_from_messages_us"], f"{p}/model_from_messages_us"),
                     _pct(c["model_from_messages_error_pct"], f"{p}/model_from_messages_error_pct"),
                     _ips(c["measured_images_per_s"], f"{p}/measured_images_per_s")])
    doc.add(Table(["strategy", "measured", "± se", "predicted (fit)", "error", "± se", "model (messages measured alone)",
                   "error", "images/s measured"], rows,
                  f"measured: median composed iteration over {na.get('rounds', '?')} rounds, max over ranks; se: the "
                  "standard error of that median; error ± se: an error within about twice its se says nothing about "
                  "the model; predicted: `gdlbench predict` from the measured phases and the "
                  "fit; model: the same phases with each message's time measured alone"))


COMPONENT_LABELS = {"compute": "compute", "comm_exposed": "exposed communication", "overlap": "overlap (hidden)",
                    "io": "I/O", "update": "update"}


def _components(doc: Doc, base: str, na: Mapping[str, Any]) -> None:
    """Each strategy's components, measured against predicted, a failed one flagged; and the
    predictions beyond the measured scale that lean on one."""
    comp = na.get("components")
    if not comp or not comp["rows"]:
        return
    p0 = f"{base}/components"
    threshold = Num(comp["threshold_pct"], f"{p0}/threshold_pct", "{:g}", 1.0, " %")
    doc.add(Heading(4, "The model's components against the measured ones"))
    doc.add(Para(["A total can agree while its parts do not. Per strategy: ",
                  "; ".join(f"{COMPONENT_LABELS[k]}: {what}" for k, what in comp["components"].items()),
                  f". Measured: {comp['rows'][0].get('measured_from', 'the traced median round, rank 0')} (a "
                  "rank's wait for the messages includes any time it waits for a slower rank, whose I/O, say, "
                  "then shows here as communication); predicted: the model's "
                  "schedule at the measured scale, read the same way. A component whose |predicted - measured| is over ", threshold,
                  " of the measured iteration did not validate (flagged), even where the total agrees."]))
    rows: list[list[Part]] = []
    for i, r in enumerate(comp["rows"]):
        for k, c in r["components"].items():
            p = f"{p0}/rows/{i}/components/{k}"
            rows.append([r["strategy"], COMPONENT_LABELS[k], _ms(c["measured_us"], f"{p}/measured_us", 2),
                         _ms(c["predicted_us"], f"{p}/predicted_us", 2), _ms(c["diff_us"], f"{p}/diff_us", 2),
                         _pct(c["diff_pct"], f"{p}/diff_pct"), "ok" if c["validated"] else "FLAGGED"])
    doc.add(Table(["strategy", "component", "measured", "predicted", "difference", "of the iteration", "validated"],
                  rows, "difference: predicted - measured; of the iteration: the difference over the measured "
                        "median iteration (the compare table's), flagged over the threshold"))
    _leaning(doc, p0, comp)


def _leaning(doc: Doc, p0: str, comp: Mapping[str, Any]) -> None:
    """The predictions beyond the measured scale that lean on a component that did not validate."""
    grows = " and ".join(COMPONENT_LABELS[k] for k in comp["grows_with_n"])
    flagged = comp["flagged_predictions"]
    if not flagged:
        doc.add(Para([f"Every prediction beyond the measured scale leans on {grows}, which grow with N: both "
                      "validated for every strategy here."]))
        return
    items: list[list[Part]] = []
    for strategy in dict.fromkeys(f["strategy"] for f in flagged):
        mine = [(i, f) for i, f in enumerate(flagged) if f["strategy"] == strategy]
        parts: list[Part] = [f"{strategy} at N = "]
        for j, (i, f) in enumerate(mine):
            parts += [", "] * (j > 0) + [Num(f["workers"], f"{p0}/flagged_predictions/{i}/workers", "{:.0f}")]
        items.append(parts + [": leans on " + ", ".join(COMPONENT_LABELS[k] for k in mine[0][1]["leans_on"])
                              + ", which did not validate"])
    doc.add(Para([f"Flagged predictions: {grows} grow with N, so a prediction beyond the measured scale leans on "
                  "them; where one did not validate here, the prediction is flagged:"]), Items(items))


def _validation(doc: Doc, v: Mapping[str, Any], n: int) -> None:
    """The validation point beyond the measured scale: measured on more nodes, against the model
    fed this study's phases and the link that run crossed; the error per component."""
    p0 = "/analysis/validation"
    doc.add(Heading(4, f"Validation beyond the measured scale: {v['shape']}", f"{v['net']}-validation"))
    comp = v["components"]
    doc.add(Para([f"The composed iteration of {v['net']} measured on {v['shape']} (", Code(v["iteration_file"]),
                  "), beside the model's prediction for those nodes from this study's phases (measured on "
                  f"{n} worker(s) on one node) and the all-reduce fit of the link that run crossed (",
                  Code(v["fit_file"]), ": inter-node alpha ", Num(v["inter_alpha_us"], f"{p0}/inter_alpha_us",
                                                                 "{:.1f}", 1.0, " us"), ", ",
                  Num(v["inter_gbs"], f"{p0}/inter_gbs", "{:.3g}", 1.0, " GB/s"),
                  "). The scaling chart draws it as measured (a filled cross) beside that prediction (an open "
                  "square). Each component's column is its error, predicted - measured, over the measured "
                  "iteration; over ", Num(comp["threshold_pct"], f"{p0}/components/threshold_pct", "{:g}", 1.0, " %"),
                  " it did not validate."]))
    rows: list[list[Part]] = []
    traced = {r["strategy"]: (j, r) for j, r in enumerate(comp["rows"])}
    for i, c in enumerate(v["compare"]):
        p = f"{p0}/compare/{i}"
        row: list[Part] = [c["strategy"], _ms(c["measured_us"], f"{p}/measured_us"),
                           Num(c.get("measured_se_us"), f"{p}/measured_se_us", "± {:.1f}", 1e-3, " ms"),
                           _ms(c["predicted_us"], f"{p}/predicted_us"), _pct(c["error_pct"], f"{p}/error_pct")]
        if c["strategy"] not in traced:  # no traced round: no components
            rows.append(row + ["-"] * (len(COMPONENT_LABELS) + 1))
            continue
        j, r = traced[c["strategy"]]
        row += [_pct(r["components"][k]["diff_pct"], f"{p0}/components/rows/{j}/components/{k}/diff_pct")
                for k in COMPONENT_LABELS]
        rows.append(row + [", ".join(COMPONENT_LABELS[k] for k in r["failed"]) + " FLAGGED" if r["failed"] else "ok"])
    source = comp["rows"][0]["measured_from"] if comp["rows"] and "measured_from" in comp["rows"][0] else "rank 0"
    doc.add(Table(["strategy", "measured", "± se", "predicted", "error",
                   *(f"{label} error" for label in COMPONENT_LABELS.values()), "components"], rows,
                  "measured: median composed iteration over the run's rounds, max over ranks; predicted: "
                  "`gdlbench predict --cluster` with this study's phases; component errors: predicted - measured "
                  f"over the measured iteration ({source})"))
    used = list(dict.fromkeys(c["predicted_contention"] for c in v["compare"] if c.get("predicted_contention")))
    if used:  # the contention the one-node study measured belongs to its link (docs/model.md)
        doc.add(Para(["Backward and the messages beside it, in the prediction: " + "; ".join(used) + "."]))
    doc.add(Details("the prediction for each strategy, as a command (run it in the study's directory)",
                    list(v["predict_commands"].values())))


def _timeline(doc: Doc, net: str, na: Mapping[str, Any]) -> None:
    """The traced iteration of every strategy, and how to read its lanes."""
    doc.add(Heading(3, "Measured timeline of one iteration per strategy"))
    traced = next((c["traced_round"] for c in na["compare"] if c.get("traced_round")), None)
    which = traced["name"] if traced else "the median round, rank 0"
    doc.add(Para([f"Each panel is one composed iteration, {which}, as the executor traced it: "
                  "I/O wait (the prefetch thread's read of the next batch in grey), copy, forward, each layer's "
                  "backward, each message on the communication thread, the wait for the last messages, the "
                  "update (a lane under 0.5 % of the longest iteration, such as the copy on a CPU, is left out). "
                  "Each panel has its own time axis; the colours are in the legend at the top. "
                  "Each panel's title gives the strategy's measured median (the table's figure) and the "
                  "length of this traced round. Every rank's trace, with the isolated phases as the model "
                  "composes them: ", Code(f"cells/trace-{net}.json"), " (Chrome trace format: open it in "
                  "ui.perfetto.dev or chrome://tracing)."]))
    doc.add(Image(f"img/timeline-{net}.png", f"{net}: measured timeline per strategy"))


def _scaling(doc: Doc, net: str, na: Mapping[str, Any], scales: list[int], n: int) -> None:
    """Images/s and efficiency per strategy and scale: measured at n, predicted elsewhere."""
    base = f"{_NETS}/{net}"
    doc.add(Heading(3, "Scaling"))
    doc.add(Image(f"img/scaling-{net}.png", f"{net}: throughput and efficiency against workers"))
    strategies = list(dict.fromkeys(r["strategy"] for r in na["predictions"]))
    measured = {c["strategy"]: i for i, c in enumerate(na["compare"])}
    rows = []
    for s in strategies:
        first = next(r for r in na["predictions"] if r["strategy"] == s)
        row: list[Part] = [s + (" (servers = workers, assumed)" if "assumed" in first.get("servers_assumption", "")
                                else " (fixed servers)" if "servers" in first else "")]
        for n_s in scales:
            i = next(k for k, r in enumerate(na["predictions"]) if r["strategy"] == s and r["workers"] == n_s)
            r = na["predictions"][i]
            if n_s == n and s in measured:  # the measured figure, the one the verdicts show
                j = measured[s]
                row.append(Num(na["compare"][j]["measured_images_per_s"], f"{base}/compare/{j}/measured_images_per_s",
                               "{:,.1f}", 1.0, " *"))
            else:
                row.append(_ips(r["images_per_s"], f"{base}/predictions/{i}/images_per_s"))
            row.append(Num(r["efficiency"], f"{base}/predictions/{i}/efficiency", "{:.2f}"))
        rows.append(row)
    doc.add(Table(["strategy"] + [h for n_s in scales for h in (f"img/s N={n_s}", f"eff. N={n_s}")], rows,
                  "* measured here (the verdicts' figure); the others predicted; efficiency = t(1)/t(N) of the same "
                  "strategy as predicted (weak scaling). Stars in the figure: measured; the shaded region of the "
                  "figure is beyond the measured scale"))

def _memory(doc: Doc, net: str, na: Mapping[str, Any], scales: list[int]) -> None:
    """Memory per worker beside the predicted time, per strategy and scale, and what fits."""
    mem = na.get("memory")
    if not mem:
        return
    base, limit, at = f"{_NETS}/{net}/memory", mem["limit_bytes"], mem.get("at")
    doc.add(Heading(3, f"Memory per worker{f' at {_shape_text(mem)}' if at else ''}: does it fit in {limit / 1e9:g} GB?",
                    f"{net}-memory"))
    doc.add(Para([f"gdlbench.model.memory per worker ({mem['optimizer']} states, {mem['precision']}, batch "
                  f"{at['batch'] if at else na['batch']}): "
                  "parameters, gradients and optimizer states as ZeRO shards them, the activations backward keeps, "
                  "the communication buffers; beside each the predicted iteration. The sharded strategies ("
                  f"{', '.join(mem.get('sharded_predicted_only', [])) or 'none'}) are predicted only (",
                  Link("the strategies", "strategies"), " lists the others)."]))
    if at:
        doc.add(Para([f"Time is measured at the study's shape, {at['measured_net']} at batch {at['measured_batch']} "
                      "per worker (the ms columns are predicted from those phases); memory is modelled at the job's "
                      f"shape, {_shape_text(mem)} per worker (--memory-at), which this study did not run."]))
    strategies = list(dict.fromkeys(r["strategy"] for r in mem["rows"]))
    rows: list[list[Part]] = []
    for s in strategies:
        row: list[Part] = [s]
        for n_s in scales:
            i = next(k for k, r in enumerate(mem["rows"]) if r["strategy"] == s and r["workers"] == n_s)
            r = mem["rows"][i]
            row += [Num(r["memory_total_bytes"], f"{base}/rows/{i}/memory_total_bytes", "{:,.2f}", 1e-9,
                        "" if r["fits"] else " (no)"), _ms(r["t_iter_us"], f"{base}/rows/{i}/t_iter_us")]
        rows.append(row)
    doc.add(Table(["strategy"] + [h for n_s in scales for h in (f"GB N={n_s}", f"ms N={n_s}")], rows,
                  f"GB = 1e9 bytes per worker, (no): over {limit / 1e9:g} GB; the total is parameters + optimizer "
                  "states + buffers + the peak of backward (activations still held and gradients made so far); "
                  "ms: the predicted iteration" + (" at the measured shape" if at else "")))
    doc.add(Items([[f"N = {n_s}: {_fits_text(mem, n_s, long=True)}"] for n_s in scales]))


def _slowest(doc: Doc, net: str, q: Mapping[str, Any]) -> None:
    """The net's slowest layers and the winner's slowest messages, as a profiler lists them."""
    base = f"/report/quoted/nets/{net}"
    doc.add(Heading(3, "Slowest layers and messages", f"{net}-slowest"))
    doc.add(Para([f"The layers that take the longest, forward + backward, each timed alone (the per-layer rows of "
                  f"{q['source']}), as a profiler's operator table lists them:"]))
    rows: list[list[Part]] = [[la["layer"], la["type"], _ms_fine(la["forward_us"], f"{base}/layers/{i}/forward_us"),
                               _ms_fine(la["backward_us"], f"{base}/layers/{i}/backward_us"),
                               _pct(la["share_pct"], f"{base}/layers/{i}/share_pct", signed=False)]
                              for i, la in enumerate(q["layers"])]
    rest = q["other_layers"]
    if rest["count"]:
        rows.append([f"{rest['count']} more", "", _ms_fine(rest["forward_us"], f"{base}/other_layers/forward_us"),
                     _ms_fine(rest["backward_us"], f"{base}/other_layers/backward_us"),
                     _pct(rest["share_pct"], f"{base}/other_layers/share_pct", signed=False)])
    doc.add(Table(["layer", "type", "forward", "backward", "share"], rows,
                  "each layer's median over the rounds, timed alone; share: of compute, the sum of every layer's "
                  "forward + backward"))
    if not q["messages"]:
        return
    tie = [s for s in q["tied"] if s != q["strategy"]]
    doc.add(Para([f"The messages of the winner at N = {q['workers']} (", Code(q["strategy"]),
                  f", tied with {', '.join(tie)}" if tie else "",
                  "), the slowest first, each timed alone (as the model prices them):"]))
    rows = [[Num(m["message"], f"{base}/messages/{i}/message", "{:.0f}"),
             _bytes(m["size_bytes"], f"{base}/messages/{i}/size_bytes"),
             _ms_fine(m["time_us"], f"{base}/messages/{i}/time_us"),
             _pct(m["share_pct"], f"{base}/messages/{i}/share_pct", signed=False), _names(m["layers"])]
            for i, m in enumerate(q["messages"])]
    rest = q["other_messages"]
    if rest["count"]:
        rows.append([f"{rest['count']} more", _bytes(rest["size_bytes"], f"{base}/other_messages/size_bytes"),
                     _ms_fine(rest["time_us"], f"{base}/other_messages/time_us"),
                     _pct(rest["share_pct"], f"{base}/other_messages/share_pct", signed=False), ""])
    doc.add(Table(["message", "size", "time alone", "share", "layers it carries"], rows,
                  "message: its place in the sending order; time: its median over the rounds, sent alone; share: of "
                  "communication, the sum of every message's time alone"))


def _ms_fine(value: float, src: str) -> Num:
    """Milliseconds to 1 decimal from 10 ms, 2 from 1 ms, else 3 (a small layer's time shows)."""
    return _ms(value, src, 1 if value >= 1e4 else 2 if value >= 1e3 else 3)


def _bytes(value: float, src: str) -> Num:
    unit, scale = next(((u, s) for u, s in ((" MB", 1e-6), (" kB", 1e-3)) if value * s >= 1), (" B", 1.0))
    return Num(value, src, "{:,.1f}" if scale < 1 else "{:.0f}", scale, unit)


def _names(layers: list[str], shown: int = 3) -> str:
    more = len(layers) - shown
    return ", ".join(layers[:shown]) + (f" and {more} more" if more > 0 else "")


def _what_ifs(doc: Doc, net: str, na: Mapping[str, Any], scales: list[int]) -> None:
    base = f"{_NETS}/{net}"
    doc.add(Heading(3, "What would make it faster"))
    doc.add(Para(["For the winning strategy at each scale, the predicted gain in images/s of each change (one "
                  "row per change, one column per scale; - where the change does not apply). The commands that "
                  "compute each number are folded away below the table (run them in the study's directory)."]))
    ws = na["what_ifs"]
    keys: list[str] = []
    for w in ws:
        for r in w["ranked"]:
            k = r["what"].split(" (")[0]
            if k not in keys:
                keys.append(k)
    rows: list[list[Part]] = [["winner", *(w["strategy"] for w in ws)],
                              ["now, images/s", *(_ips(w["base_images_per_s"], f"{base}/what_ifs/{k}/base_images_per_s")
                                                  for k, w in enumerate(ws))]]
    for key in keys:
        row: list[Part] = [key]
        for k, w in enumerate(ws):
            j = next((j for j, r in enumerate(w["ranked"]) if r["what"].split(" (")[0] == key), None)
            row.append("-" if j is None else
                       _pct(w["ranked"][j]["gain_pct"], f"{base}/what_ifs/{k}/ranked/{j}/gain_pct"))
        rows.append(row)
    doc.add(Table(["what-if"] + [f"N = {w['workers']}" for w in ws], rows,
                  "gain in images/s over the winner as it is; the fusion row's bucket size is the best of the sweep"))
    for w in ws:
        doc.add(Details(f"N = {w['workers']}: the {len(w['ranked']) + 1} commands ({w['strategy']})",
                        [f"# now: {w['base_images_per_s']:,.1f} images/s", w["base_command"],
                         *(line for r in w["ranked"] for line in (f"# {r['what']}: {r['gain_pct']:+.1f} %",
                                                                   r["command"]))]))


# ---------------------------------------------------------------------------------------------
# What the report quotes from the cells

TOP = 8  # rows of a slowest-first table; the rest are summed in one row


def quote_cells(root: Path, index: Mapping[str, Any]) -> dict[str, Any]:
    """The cells' rows the report shows beyond the analysis, copied into study.json (report.quoted)
    so every number traces to a field there: the fit cell's all-reduce rows (each with the time the
    fit gives at its size, and its row in the cell), and per net its slowest layers (the iteration
    cell's per-layer rows) and the slowest messages of the strategy that won where it was measured."""
    out: dict[str, Any] = {"bandwidth": [], "nets": {}}
    fit_file = root / "cells/allreduce-fit.json"
    if fit_file.is_file():
        cell = json.loads(fit_file.read_text())
        fits = cell["summary"].get("fit") or []
        fits = fits.get("whole", []) if isinstance(fits, dict) else fits  # several nodes: the whole communicator
        line = {(f["algo"], p["size_bytes"]): p["predicted_us"] for f in fits for p in f.get("points", [])}
        out["bandwidth"] = [{**{k: r.get(k) for k in ("algo", "size_bytes", "count", "dtype", "nranks", "time_us",
                                                        "algbw_gbs", "busbw_gbs", "wrong")},
                             "fit_us": line.get((r["algo"], r["size_bytes"])), "row": i}
                            for i, r in enumerate(cell["rows"]) if r.get("collective") == "allreduce"]
    for net, na in index["analysis"]["nets"].items():
        cell = json.loads((root / na["phases_file"]).read_text())
        layers: dict[str, dict[str, Any]] = {}
        for r in cell["rows"]:
            if "layer" in r:
                la = layers.setdefault(r["layer"], {"layer": r["layer"], "type": r["type"]})
                la[f"{r['phase']}_us"] = r["time_us"]
        for la in layers.values():
            la["total_us"] = la["forward_us"] + la["backward_us"]
        measured = next((v for v in na["verdicts"] if v["source"] == "measured"), None)
        winner = measured["winner"] if measured else None
        messages = [{"message": r["message"], "size_bytes": r["size_bytes"], "time_us": r["time_us"],
                     "layers": r["layers"]} for r in cell["rows"]
                    if r.get("phase") == "message" and r.get("strategy") == winner]
        out["nets"][net] = {"source": na["phases_file"], "strategy": winner, "workers": na["measured_workers"],
                            "tied": measured["tied"] if measured else [],
                            **_top("layers", list(layers.values()), "total_us", ("forward_us", "backward_us")),
                            **_top("messages", messages, "time_us", ("size_bytes", "time_us"))}
    return out


def _top(name: str, rows: list[dict[str, Any]], key: str, summed: tuple[str, ...]) -> dict[str, Any]:
    """The TOP rows with the largest `key`, each with its share of the whole in %, and the others
    summed (`summed` fields, their count and share)."""
    total = sum(r[key] for r in rows) or 1.0
    ranked = sorted(rows, key=lambda r: r[key], reverse=True)
    rest = ranked[TOP:]
    return {name: [{**r, "share_pct": 100.0 * r[key] / total} for r in ranked[:TOP]],
            f"other_{name}": {"count": len(rest), **{k: sum(r[k] for r in rest) for k in summed},
                              "share_pct": 100.0 * sum(r[key] for r in rest) / total}}


# ---------------------------------------------------------------------------------------------
# Figures and files


def draw_figures(root: Path, index: Mapping[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """The figures, and the numbers each one prints (kept in study.json's report.figures, so a test
    can check that a chart shows the same figure as the tables)."""
    an = index["analysis"]
    made = []
    data: dict[str, Any] = {}
    (root / "img").mkdir(exist_ok=True)
    for net, na in an["nets"].items():
        n = na["measured_workers"]
        bars = []
        fig: dict[str, Any] = {"breakdown": [], "timeline": [], "scaling_measured": []}
        for c in na["compare"]:
            if c["measured_breakdown_us"]:
                mb = {k: v for k, v in c["measured_breakdown_us"].items() if k in plots.LANES}
                bars.append((f"{c['strategy']}\nmeasured\n(traced round)", mb))
                fig["breakdown"].append({"strategy": c["strategy"], "bar": "traced round",
                                         "total_us": sum(mb.values())})
            bars.append((f"{c['strategy']}\npredicted\n({c['error_pct']:+.1f} %)", c["predicted_breakdown_us"]))
            fig["breakdown"].append({"strategy": c["strategy"], "bar": "predicted",
                                     "total_us": sum(c["predicted_breakdown_us"].values()),
                                     "error_pct": c["error_pct"]})
        if bars:
            plots.plot_breakdown(bars, root / f"img/breakdown-{net}.png",
                                 title=f"{net}, batch {na['batch']}, N = {n}: measured (the traced median round) "
                                       "and predicted (error against the median)")
        doc = json.loads((root / na["phases_file"]).read_text())
        tls = doc["summary"].get("measured_timelines", {})
        items = []
        for c in na["compare"]:
            tl = tls.get(c["strategy"])
            if not tl or not tl["timeline"]:
                continue
            items.append((f"{c['strategy']}: measured median {c['measured_us'] / 1e3:.1f} ms; this trace "
                          f"(round {c['traced_round']['round']}, rank 0) {tl['t_iter_us'] / 1e3:.1f} ms, comm "
                          f"exposed {max(0.0, tl['comm_exposed_us']) / 1e3:.1f} ms", tl["timeline"], tl["t_iter_us"]))
            fig["timeline"].append({"strategy": c["strategy"], "measured_us": c["measured_us"],
                                    "traced_t_iter_us": tl["t_iter_us"], "round": c["traced_round"]["round"]})
        if items:
            plots.plot_timelines(items, root / f"img/timeline-{net}.png", title=f"{net}, N = {n}")
        measured = []
        for c in na["compare"]:
            t1 = next(r["t_iter_1_us"] for r in na["predictions"] if r["strategy"] == c["strategy"])
            measured.append({"strategy": c["strategy"], "workers": n, "images_per_s": c["measured_images_per_s"],
                             "efficiency": t1 / c["measured_us"]})
        fig["scaling_measured"] = measured
        val = an.get("validation")
        fig["scaling_validation"] = validation_points(na, val) if val and val["net"] == net else []
        plots.plot_scaling_panels(na["predictions"], root / f"img/scaling-{net}.png", measured=measured,
                                  title=f"{net}, batch {na['batch']} per worker: predicted lines, measured stars "
                                        "(efficiency against the model's t(1)); shaded: beyond the measured scale",
                                  measured_upto=n, validation=fig["scaling_validation"],
                                  validation_label=val["shape"] if val else "")
        made += [f"img/{k}-{net}.png" for k in ("breakdown", "timeline", "scaling")
                 if (root / f"img/{k}-{net}.png").is_file()]
        data[net] = fig
    for f in made:
        shrink_png(root / f)
    return made, data


def validation_points(na: Mapping[str, Any], v: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The validation run per strategy as the scaling chart draws it: measured (images/s of all
    workers, efficiency against the study's t(1)) and the model's prediction for those nodes."""
    out = []
    for c in v["compare"]:
        t1 = next(r["t_iter_1_us"] for r in na["predictions"] if r["strategy"] == c["strategy"])
        out.append({"strategy": c["strategy"], "workers": c["workers"], "images_per_s": c["measured_images_per_s"],
                    "efficiency": t1 / c["measured_us"],
                    "predicted_images_per_s": c["workers"] * na["batch"] / (c["predicted_us"] * 1e-6),
                    "predicted_efficiency": t1 / c["predicted_us"]})
    return out


def shrink_png(path: Path) -> None:
    """The figure with a palette of 128 colours (a quarter of the bytes; the plots use few colours),
    so the HTML that embeds them stays small enough to mail and to open on a phone."""
    from PIL import Image as PILImage

    buf = io.BytesIO()
    with PILImage.open(path) as im:
        im.convert("RGB").quantize(colors=128).save(buf, "PNG", optimize=True)
    write_atomic(path, buf.getvalue())


def write_report(root: Path, index: Mapping[str, Any]) -> dict[str, Any]:
    """Figures, report.html and report.md; returns what was written (for the index)."""
    images, figures = draw_figures(root, index)
    quoted = quote_cells(root, index)
    doc = build_document(index, quoted)
    doc.blocks = [b for b in doc.blocks if not isinstance(b, Image) or (root / b.file).is_file()]
    write_atomic(root / "report.md", render_markdown(doc))
    write_atomic(root / "report.html", render_html(doc, root))
    return {"html": "report.html", "markdown": "report.md", "images": images, "figures": figures, "quoted": quoted,
            "phase_groups": {k: list(v) for k, v in PHASE_GROUPS.items()}}
