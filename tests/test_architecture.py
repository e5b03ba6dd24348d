"""The package's layers (docs/architecture.md): each sub-package imports only from its own layer
and the ones below it, never from one above; the CLI (gdlbench/cli/) is the top, so no library
module imports it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "gdlbench"  # the source tree, not the installed copy
# Bottom to top. The top-level private modules (_native loads the native modules, _fault, _checkout)
# and the root package's own names (__version__, _core, _cuda) sit with `common`; the root
# __init__.py (the public API, re-exporting every layer) and __main__.py (the CLI's entry) are outside.
LAYERS = ["common", "nets", "primitives", "model", "composed", "whatif", "study", "cli"]
BOTTOM = {"", "_native", "_fault", "_checkout", "_core", "_cuda", "__version__"}
OUTSIDE = {"__init__.py", "__main__.py"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    """The modules an ImportFrom names, made absolute (`from .. import cli` names gdlbench.cli)."""
    if node.level:
        base = module.split(".")
        base = base[: len(base) - node.level + (1 if is_package else 0)]
        stem = ".".join(base + ([node.module] if node.module else []))
    else:
        stem = node.module or ""
    return [stem] + [f"{stem}.{alias.name}" for alias in node.names]


def _string_arg(call: ast.Call) -> str:
    """The text of a dynamic import's first argument (f-strings: their constant parts)."""
    if not call.args:
        return ""
    arg = call.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.JoinedStr):
        return "".join(v.value for v in arg.values if isinstance(v, ast.Constant) and isinstance(v.value, str))
    return ""


def _resolve(name: str, package: str) -> str:
    """importlib's name resolution: '..x' from package a.b.c is a.b.x."""
    level = len(name) - len(name.lstrip("."))
    if not level:
        return name
    base = package.split(".")[: len(package.split(".")) - level + 1]
    return ".".join(base + ([name[level:]] if name[level:] else []))


def imports_of(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in a file: import, from-import (relative made absolute),
    and importlib.import_module / __import__ calls with a literal or f-string name (relative to
    the file's package)."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            out += [(node.lineno, name) for name in _absolute(node, module, path.name == "__init__.py")]
        elif isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name in ("import_module", "__import__"):
                text = _string_arg(node)
                out.append((node.lineno, _resolve(text, package)))
    return out


def layer_of(module: str) -> int | None:
    """The layer index of a gdlbench module (None: not gdlbench's)."""
    if module != "gdlbench" and not module.startswith("gdlbench."):
        return None
    head = module.split(".")[1] if "." in module else ""
    return 0 if head in BOTTOM else LAYERS.index(head) if head in LAYERS else None


def upward_imports(path: Path) -> list[str]:
    """Each import of `path` that reaches a layer above its own."""
    own = layer_of(_module_name(path))
    assert own is not None, f"{path}: not in a layer: add it to LAYERS or BOTTOM"
    return [f"{path.relative_to(PACKAGE.parent)}:{line}: imports {name} ({LAYERS[layer_of(name) or 0]})"
            for line, name in imports_of(path) if (layer_of(name) or 0) > own]


def test_the_walk_sees_every_kind_of_upward_import(tmp_path):
    """The checker itself: each way of importing a higher layer is found, and downward or
    same-layer imports are not."""
    global PACKAGE
    saved, PACKAGE = PACKAGE, tmp_path / "gdlbench"
    cases = {"a.py": "from ..cli import main\n", "b.py": "from .. import cli\n",
             "c.py": "from ..whatif.prediction import evaluate\n", "d.py": "import gdlbench.cli.commands.gemm\n",
             "e.py": "import importlib\nimportlib.import_module(f'..study.{x}', __package__)\n",
             "f.py": "def f():\n    from ..composed import iteration\n"}
    try:
        (PACKAGE / "model").mkdir(parents=True)
        for name, text in cases.items():
            (PACKAGE / "model" / name).write_text(text)
            assert upward_imports(PACKAGE / "model" / name), name
        (PACKAGE / "model" / "ok.py").write_text("from ..common.errors import UsageError\nfrom . import costmodel\n"
                                                 "from .. import _core\nfrom ..primitives import gemm\n")
        assert not upward_imports(PACKAGE / "model" / "ok.py")
    finally:
        PACKAGE = saved


def _layered_files() -> list[Path]:
    return [p for p in sorted(PACKAGE.rglob("*.py")) if p.relative_to(PACKAGE).as_posix() not in OUTSIDE]


@pytest.mark.parametrize("path", _layered_files(), ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_imports_only_run_downwards(path):
    """No module imports a layer above its own (also inside functions and under TYPE_CHECKING):
    the CLI parses, calls the library and prints; the study composes the layers below it."""
    bad = upward_imports(path)
    assert not bad, "\n".join(bad)


def test_every_top_level_module_is_in_a_layer():
    """A new module goes into a layer's folder, not loose at the package's root."""
    loose = [p.name for p in PACKAGE.glob("*.py") if p.name not in OUTSIDE and p.stem not in BOTTOM]
    assert not loose, f"put these in a layer's folder: {loose}"


# ---- function length -------------------------------------------------------------------------

MAX_FUNCTION_LINES = 60


def long_functions(path: Path, limit: int = MAX_FUNCTION_LINES) -> list[tuple[int, str, int]]:
    """(line, name, lines) of each function or method in a file longer than `limit` lines, from
    its def line to its last line (docstring included, decorators not; a nested function counts
    in its own length and in the enclosing one's)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > limit:
                out.append((node.lineno, node.name, lines))
    return out


def test_the_length_check_sees_methods_and_nested_functions(tmp_path):
    """The checker itself: a long method and a long nested function (and so the one around it)
    are found; a function of exactly the limit is not."""
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES - 1))  # with its def: the limit
    nested = body.replace("    ", "        ")
    path = tmp_path / "m.py"
    path.write_text(f"def at_the_limit():\n{body}\n"
                    f"class C:\n    def long(self):\n{nested}        y = 0\n\n"
                    f"def outer():\n    def inner():\n{nested}        y = 0\n")
    assert sorted(name for _, name, _ in long_functions(path)) == ["inner", "long", "outer"]


def test_no_function_is_longer_than_60_lines():
    """Long functions are split into named steps (issue 34), everywhere in the package."""
    long = [f"{path.relative_to(PACKAGE.parent)}:{line} {name} ({lines} lines)"
            for path in sorted(PACKAGE.rglob("*.py"))
            for line, name, lines in long_functions(path)]
    assert not long, "split these into named steps:\n" + "\n".join(long)
