"""The study's report: one document built from the index (study.json), written as a
self-contained HTML page (images embedded as data URIs, no script, no network, readable on a
phone) and as Markdown with PNG files. Both come from the same blocks, so they hold the same
content. Every number is a `Num` that names the JSON field it shows (a JSON pointer into
study.json; in the HTML its `data-src`), so any number can be traced and checked."""

from __future__ import annotations

import base64
import html
import io
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import plots
from .paths import write_atomic
from .study import PHASE_GROUPS

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


Part = str | Num | Code


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


Block = Heading | Para | Table | Image | Commands | Items


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
        else:
            out.append(html.escape(p))
    return "".join(out)


CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;line-height:1.45;color:#1b1b1b;
 max-width:62rem;margin:0 auto;padding:0.8rem;background:#fff}
h1{font-size:1.5rem}h2{font-size:1.25rem;border-bottom:1px solid #ddd;padding-bottom:.2rem;margin-top:2rem}
h3{font-size:1.08rem;margin-top:1.4rem}
img{max-width:100%;height:auto;display:block;margin:.6rem 0}
.t{overflow-x:auto;-webkit-overflow-scrolling:touch;margin:.6rem 0}
table{border-collapse:collapse;font-size:.9rem}
th,td{border:1px solid #ddd;padding:.25rem .5rem;text-align:right;white-space:nowrap}
.l{text-align:left}.kv td{white-space:normal;overflow-wrap:anywhere}.kv td:first-child{white-space:nowrap}
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
            cls = ["" if any(isinstance(row[i], Num) for row in b.rows) else ' class="l"' for i in range(len(b.headers))]
            head = "".join(f"<th{c}>{html.escape(h)}</th>" for c, h in zip(cls, b.headers, strict=True))
            body = "".join("<tr>" + "".join(f"<td{c}>{_html_parts([x])}</td>" for c, x in zip(cls, row, strict=True))
                           + "</tr>" for row in b.rows)
            cap = f"<caption>{html.escape(b.caption)}</caption>" if b.caption else ""
            thead = f"<thead><tr>{head}</tr></thead>" if any(b.headers) else ""
            kind = "kv" if not any(b.headers) else ""
            out.append(f'<div class="t"><table class="{kind}">{cap}{thead}<tbody>{body}</tbody></table></div>')
        elif isinstance(b, Image):
            data = base64.b64encode((root / b.file).read_bytes()).decode()
            out.append(f'<img alt="{html.escape(b.alt)}" src="data:image/png;base64,{data}">')
        elif isinstance(b, Commands):
            out.append("<pre>" + html.escape("\n".join(b.lines)) + "</pre>")
        elif isinstance(b, Items):
            tag = "ol" if b.ordered else "ul"
            out.append(f"<{tag}>" + "".join(f"<li>{_html_parts(i)}</li>" for i in b.items) + f"</{tag}>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _md_parts(parts: list[Part], cell: bool = False) -> str:
    out = []
    for p in parts:
        if isinstance(p, Num):
            out.append(p.text())
        elif isinstance(p, Code):
            out.append(f"`{p.text}`")
        else:
            out.append(p)
    text = "".join(out)
    return text.replace("|", "\\|") if cell else text


def render_markdown(doc: Doc) -> str:
    out = [f"# {doc.title}", ""]
    for b in doc.blocks:
        if isinstance(b, Heading):
            out += ["#" * b.level + " " + b.text, ""]
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
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# The study's document


def _ms(value: float | None, src: str, digits: int = 1) -> Num:
    return Num(value, src, f"{{:.{digits}f}}", 1e-3, " ms")


def _pct(value: float | None, src: str, signed: bool = True) -> Num:
    return Num(value, src, "{:+.1f}" if signed else "{:.1f}", 1.0, " %")


def _ips(value: float | None, src: str) -> Num:
    return Num(value, src, "{:,.1f}" if value is not None and value < 1e4 else "{:,.0f}")


def build_document(index: Mapping[str, Any]) -> Doc:
    cfg, an, env, prov = index["config"], index["analysis"], index.get("env", {}), index.get("provenance", {})
    n_meas = cfg["world_size"]
    doc = Doc(f"gdlbench study: {', '.join(cfg['nets'])} on {n_meas} rank(s), {cfg['device']}")
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
    # Headline: the verdicts.
    doc.add(Heading(2, "Verdicts", "verdicts"))
    doc.add(Para(["Per net and scale: the strategy that wins (highest images/s) and by how much over the next, the "
                  "phase group that takes the most time in its iteration (I/O = read + copy; compute = forward + "
                  "backward; communication = exposed, not hidden behind backward; update), and the share of the "
                  "iteration that is exposed communication. Rows marked measured come from the composed runs "
                  "here; the others from the model."]))
    rows = []
    for net, na in an["nets"].items():
        for i, v in enumerate(na["verdicts"]):
            p = f"/analysis/nets/{net}/verdicts/{i}"
            rows.append([net, Num(v["workers"], f"{p}/workers", "{:.0f}"), v["source"], v["winner"],
                         _ips(v["winner_images_per_s"], f"{p}/winner_images_per_s"),
                         v["runner_up"] or "-", _pct(v["margin_pct"], f"{p}/margin_pct"),
                         f"{v['bound_by']}", _pct(v["bound_share_pct"], f"{p}/bound_share_pct", signed=False),
                         _pct(v["comm_exposed_pct"], f"{p}/comm_exposed_pct", signed=False)])
    doc.add(Table(["net", "N", "from", "winner", "images/s", "runner-up", "margin", "bound by", "its share",
                   "comm exposed"], rows,
                  "margin: how much longer the runner-up's iteration is; shares of the winner's iteration"))
    doc.add(Heading(2, "How to read this report", "how-to-read"))
    doc.add(Items([["Verdicts (above): the answer in one table. Then, per net: ",
                    "the measured iteration against the model (the model is only worth its predictions where it "
                    "matches what was measured), the measured timeline of one iteration per strategy, the scaling "
                    "curves, and the optimisation directions ranked by predicted gain."],
                   ["Every number comes from ", Code("study.json"), " (in the HTML each number's ",
                    Code("data-src"), " names its field); the measurements themselves are in ", Code("cells/"),
                    " in the JSON shape every gdlbench command writes."],
                   ["Each optimisation direction carries the ", Code("gdlbench predict"),
                    " command that computes it: run it in the study's directory to get the same number."]]))
    _provenance(doc, index, cfg, env, prov)
    _fit(doc, an)
    for net in cfg["nets"]:
        _net_section(doc, net, an["nets"][net], cfg)
    doc.add(Heading(2, "Notes", "notes"))
    doc.add(Items([[n] for n in an.get("notes", [])]))
    return doc


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
                      "the library fit prices the all-reduce strategies, ps the parameter-server ones"))
    else:
        doc.add(Para(["No fit: the predictions use the link given with --link or the cluster of --cluster."]))
    c = an["compress"]
    doc.add(Para(["Top-k compression at ratio ", Num(c["ratio"], "/analysis/compress/ratio", "{:g}"),
                  " (k = n/(2r) values kept as index + value): encode ",
                  Num(c["encode_us_per_byte"], "/analysis/compress/encode_us_per_byte", "{:.3f}", 1e3, " ns"),
                  " per dense byte, measured by ", Code("gdlbench compress"), " (cells/compress.json)."]))


def _net_section(doc: Doc, net: str, na: Mapping[str, Any], cfg: Mapping[str, Any]) -> None:
    base = f"/analysis/nets/{net}"
    doc.add(Heading(2, f"{net}: batch {na['batch']} per worker", net))
    n = na["measured_workers"]
    doc.add(Heading(3, f"Measured on {n} worker(s) against the model"))
    rows = []
    for i, c in enumerate(na["compare"]):
        p = f"{base}/compare/{i}"
        rows.append([c["strategy"], _ms(c["measured_us"], f"{p}/measured_us"),
                     _ms(c["predicted_us"], f"{p}/predicted_us"), _pct(c["error_pct"], f"{p}/error_pct"),
                     _ms(c["model_from_messages_us"], f"{p}/model_from_messages_us"),
                     _pct(c["model_from_messages_error_pct"], f"{p}/model_from_messages_error_pct"),
                     _ips(c["measured_images_per_s"], f"{p}/measured_images_per_s")])
    doc.add(Table(["strategy", "measured", "predicted (fit)", "error", "model (messages measured alone)", "error",
                   "images/s measured"], rows,
                  "measured: median composed iteration, max over ranks; predicted: `gdlbench predict` from the "
                  "measured phases and the fit; model: the same phases with each message's time measured alone"))
    doc.add(Image(f"img/breakdown-{net}.png", f"{net}: phase breakdown per strategy, measured and predicted"))
    doc.add(Heading(3, "Measured timeline of one iteration per strategy"))
    doc.add(Para(["Each panel is one composed iteration (the median round) as the executor traced it on rank 0: "
                  "I/O wait (the prefetch thread's read of the next batch in grey), copy, forward, each layer's "
                  "backward, each message on the communication thread, the wait for the last messages, the "
                  "update. Every rank's trace, with the isolated phases as the model composes them: ",
                  Code(f"cells/trace-{net}.json"), " (Chrome trace format: open it in ui.perfetto.dev or "
                  "chrome://tracing)."]))
    doc.add(Image(f"img/timeline-{net}.png", f"{net}: measured timeline per strategy"))
    doc.add(Heading(3, "Scaling"))
    doc.add(Image(f"img/scaling-{net}.png", f"{net}: throughput and efficiency against workers"))
    strategies = list(dict.fromkeys(r["strategy"] for r in na["predictions"]))
    scales = cfg["scales"]
    rows = []
    for s in strategies:
        row: list[Part] = [s]
        for n_s in scales:
            i = next(k for k, r in enumerate(na["predictions"]) if r["strategy"] == s and r["workers"] == n_s)
            r = na["predictions"][i]
            row += [_ips(r["images_per_s"], f"{base}/predictions/{i}/images_per_s"),
                    Num(r["efficiency"], f"{base}/predictions/{i}/efficiency", "{:.2f}")]
        rows.append(row)
    doc.add(Table(["strategy"] + [h for n_s in scales for h in (f"img/s N={n_s}", f"eff. N={n_s}")], rows,
                  "predicted; efficiency = t(1)/t(N) of the same strategy (weak scaling). Stars in the figure: "
                  "measured here"))
    doc.add(Heading(3, "What would make it faster"))
    doc.add(Para(["For the winning strategy at each scale, the predicted gain in images/s of each change, ranked; "
                  "each line's command computes it (run in the study's directory)."]))
    for k, w in enumerate(na["what_ifs"]):
        p = f"{base}/what_ifs/{k}"
        doc.add(Para([f"N = {w['workers']}, {w['strategy']}: now ",
                      _ips(w["base_images_per_s"], f"{p}/base_images_per_s"), " images/s (",
                      _ms(w["base_t_iter_us"], f"{p}/base_t_iter_us"), " per iteration; ",
                      Code(w["base_command"]), ")"]))
        items: list[list[Part]] = []
        for j, r in enumerate(w["ranked"]):
            q = f"{p}/ranked/{j}"
            items.append([_pct(r["gain_pct"], f"{q}/gain_pct"), f" {r['what']}: ",
                          _ips(r["images_per_s"], f"{q}/images_per_s"), " images/s. ", Code(r["command"])])
        doc.add(Items(items, ordered=True))
        if w.get("bucket_sweep"):
            doc.add(Table(["bucket"] + [f"{b['bucket_mib']} MiB" for b in w["bucket_sweep"]],
                          [["images/s", *(_ips(b["images_per_s"], f"{p}/bucket_sweep/{i}/images_per_s")
                                          for i, b in enumerate(w["bucket_sweep"]))]],
                          "the bucket sweep behind the fusion line"))


# ---------------------------------------------------------------------------------------------
# Figures and files


def draw_figures(root: Path, index: Mapping[str, Any]) -> list[str]:
    an = index["analysis"]
    made = []
    (root / "img").mkdir(exist_ok=True)
    for net, na in an["nets"].items():
        n = na["measured_workers"]
        bars = []
        for c in na["compare"]:
            if c["measured_breakdown_us"]:
                mb = {k: v for k, v in c["measured_breakdown_us"].items() if k in plots.LANES}
                bars.append((f"{c['strategy']}\nmeasured", mb))
            bars.append((f"{c['strategy']}\npredicted\n({c['error_pct']:+.1f} %)", c["predicted_breakdown_us"]))
        if bars:
            plots.plot_breakdown(bars, root / f"img/breakdown-{net}.png",
                                 title=f"{net}, batch {na['batch']}, N = {n}: measured (one traced iteration) "
                                       "and predicted (error of the median)")
        doc = json.loads((root / na["phases_file"]).read_text())
        tls = doc["summary"].get("measured_timelines", {})
        items = [(f"{s}: measured, t_iter {tl['t_iter_us'] / 1e3:.1f} ms, comm exposed "
                  f"{max(0.0, tl['comm_exposed_us']) / 1e3:.1f} ms", tl["timeline"], tl["t_iter_us"])
                 for s, tl in tls.items() if tl["timeline"]]
        if items:
            plots.plot_timelines(items, root / f"img/timeline-{net}.png", title=f"{net}, N = {n}")
        measured = []
        for c in na["compare"]:
            t1 = next(r["t_iter_1_us"] for r in na["predictions"] if r["strategy"] == c["strategy"])
            measured.append({"strategy": c["strategy"], "workers": n, "images_per_s": c["measured_images_per_s"],
                             "efficiency": t1 / c["measured_us"]})
        plots.plot_scaling_panels(na["predictions"], root / f"img/scaling-{net}.png", measured=measured,
                                  title=f"{net}, batch {na['batch']} per worker: predicted lines, measured stars "
                                        "(efficiency against the model's t(1))")
        made += [f"img/{k}-{net}.png" for k in ("breakdown", "timeline", "scaling")
                 if (root / f"img/{k}-{net}.png").is_file()]
    for f in made:
        shrink_png(root / f)
    return made


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
    images = draw_figures(root, index)
    doc = build_document(index)
    doc.blocks = [b for b in doc.blocks if not isinstance(b, Image) or (root / b.file).is_file()]
    write_atomic(root / "report.md", render_markdown(doc))
    write_atomic(root / "report.html", render_html(doc, root))
    return {"html": "report.html", "markdown": "report.md", "images": images,
            "phase_groups": {k: list(v) for k, v in PHASE_GROUPS.items()}}
