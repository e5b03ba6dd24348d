"""Imported from a source checkout's root (`python -m gdlbench` there), Python finds the checkout's
gdlbench folder first, which has no built native modules. This points the package at the installed
copy instead (its modules, its __main__), or says in one line what to do."""

from __future__ import annotations

import importlib.machinery
import sys
from pathlib import Path


def _has_core(folder: Path) -> bool:
    return any(folder.glob("_core.*.so")) or any(folder.glob("_core.*.pyd"))


def use_installed_if_unbuilt(package_path: list[str]) -> None:
    """If the package folder has no _core, make `package_path` (the package's __path__) the
    installed gdlbench's folder. Without an installed copy: ImportError (or, for `python -m
    gdlbench`, one line on stderr and exit 2)."""
    here = Path(package_path[0]).resolve()
    if _has_core(here):
        return
    checkout = here.parent
    others = [p for p in sys.path if Path(p or ".").resolve() != checkout]
    spec = importlib.machinery.PathFinder.find_spec("gdlbench", others)
    installed = Path(spec.submodule_search_locations[0]).resolve() if spec and spec.submodule_search_locations else None
    if installed is not None and installed != here and _has_core(installed):
        package_path[:] = [str(installed)]
        return
    message = (f"gdlbench: {here} is a source checkout without the built native module _core and no installed "
               f"gdlbench was found: run `pip install .` in {checkout} (then `gdlbench ...` works anywhere)")
    if sys.argv[:1] == ["-m"]:  # python -m gdlbench: one line, not a traceback
        print(message, file=sys.stderr)
        raise SystemExit(2)
    raise ImportError(message)
