"""The package's layers: the library never imports its CLI (gdlbench/commands/ and gdlbench/cli.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "gdlbench"  # the source tree, not the installed copy
CLI = ("gdlbench.cli", "gdlbench.commands")
# The CLI itself, and `python -m gdlbench`, which is the CLI's entry point.
CLI_FILES = {"cli.py", "__main__.py"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    """The modules an ImportFrom names, made absolute (`from . import cli` names gdlbench.cli)."""
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


def imports_of(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in a file: import, from-import (relative made absolute),
    and importlib.import_module / __import__ calls with a literal or f-string name."""
    module = _module_name(path)
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
                out.append((node.lineno, "gdlbench" + text if text.startswith(".") else text))
    return out


def _library_files() -> list[Path]:
    return [p for p in sorted(PACKAGE.rglob("*.py"))
            if "commands" not in p.relative_to(PACKAGE).parts and p.relative_to(PACKAGE).as_posix() not in CLI_FILES]


def _is_cli(name: str) -> bool:
    return any(name == c or name.startswith(c + ".") for c in CLI)


def test_the_walk_sees_every_kind_of_import(tmp_path):
    """The checker itself: each way of importing the CLI is found."""
    cases = {"a.py": "from .cli import main\n", "b.py": "from . import cli\n",
             "c.py": "from .commands.predict import evaluate\n", "d.py": "import gdlbench.commands.gemm\n",
             "e.py": "import importlib\nimportlib.import_module(f'.commands.{x}', __package__)\n",
             "f.py": "def f():\n    from .commands import allreduce\n"}
    global PACKAGE
    saved, PACKAGE = PACKAGE, tmp_path / "gdlbench"
    try:
        PACKAGE.mkdir()
        for name, text in cases.items():
            (PACKAGE / name).write_text(text)
            assert any(_is_cli(m) for _, m in imports_of(PACKAGE / name)), name
        (PACKAGE / "ok.py").write_text("from .commandsx import y\nfrom . import report\n")
        assert not any(_is_cli(m) for _, m in imports_of(PACKAGE / "ok.py"))
    finally:
        PACKAGE = saved


@pytest.mark.parametrize("path", _library_files(), ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_the_library_never_imports_the_cli(path):
    """No module outside gdlbench/commands/ and gdlbench/cli.py imports from them (also inside
    functions and under TYPE_CHECKING): the CLI parses, calls the library and prints."""
    bad = [f"{path.relative_to(PACKAGE.parent)}:{line}: imports {name}"
           for line, name in imports_of(path) if _is_cli(name)]
    assert not bad, "\n".join(bad)


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
