# SPDX-License-Identifier: Apache-2.0
"""The house rules of pyxdp, checked on the source: each subpackage imports
only from the layers below it, and no module imports itself back through
others (docs/architecture.md, "Layout"). Function-level imports count: hiding a cycle
inside a function does not remove it. Imports under `if TYPE_CHECKING:`
count for the layers but not for cycles: they never run."""

import ast
import os
import pathlib

import pyxdp

# Lowest first. A module may import its own package and any earlier layer.
LAYERS = (
    {"pyxdp", "pyxdp.bpf"},  # errors, human: leaves everything builds on
    {"pyxdp.kernel"},
    {"pyxdp.proto"},
    {"pyxdp.xdp", "pyxdp.tuning"},
    {"pyxdp.xsk"},
    {"pyxdp.relay"},
    {"pyxdp.streams"},
    {"pyxdp.observe"},
    {"pyxdp.service"},
    {"pyxdp.lab"},
    {"pyxdp.bench"},
    {"pyxdp.cli"},
)
ROOT = pathlib.Path(pyxdp.__file__).parent


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_of(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 or (ROOT / parts[-1]).is_dir() else "pyxdp"


def layer_of(module: str) -> int:
    package = package_of(module)
    for index, members in enumerate(LAYERS):
        if package in members:
            return index
    raise AssertionError(f"{module} is in no layer: add its package to LAYERS")


def modules() -> dict[str, pathlib.Path]:
    # os.walk, not rglob: in a checkout pyxdp/tuning and pyxdp/bpf are symlinks.
    found = {module_name(pathlib.Path(d, f)): pathlib.Path(d, f)
             for d, _, files in os.walk(ROOT, followlinks=True) if "__pycache__" not in d
             for f in files if f.endswith(".py")}
    assert len(found) > 40, "the package was not found whole"
    return found


def _type_checking_only(tree: ast.Module) -> set[ast.AST]:
    return {node for block in ast.walk(tree) if isinstance(block, ast.If)
            and ast.unparse(block.test).endswith("TYPE_CHECKING")
            for stmt in block.body for node in ast.walk(stmt)}


def imports_of(module: str, path: pathlib.Path, known: set[str],
               run_time_only: bool = False) -> set[str]:
    """The pyxdp modules MODULE imports, anywhere in its body."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    skip = _type_checking_only(tree) if run_time_only else set()
    out = set()
    for node in ast.walk(tree):
        if node in skip:
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1]
                                + ([base] if base else []))
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                     for a in node.names]
        else:
            continue
        out |= {n for n in names if n in known and n != module}
    return out


def graph(run_time_only: bool = False) -> dict[str, set[str]]:
    found = modules()
    return {m: imports_of(m, p, set(found), run_time_only) for m, p in found.items()}


def test_every_import_points_down_or_sideways_within_a_package():
    upward = [f"{m} imports {dep}"
              for m, deps in graph().items() for dep in deps
              if m != "pyxdp.__main__" and layer_of(dep) > layer_of(m)
              or layer_of(dep) == layer_of(m) and package_of(dep) != package_of(m)
              and package_of(dep) != "pyxdp"]
    assert upward == []


def import_cycles() -> list[str]:
    """Each circle of run-time imports, as `a -> b -> a`."""
    edges = graph(run_time_only=True)
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles = []

    def visit(node, path):
        state[node] = 1
        for dep in sorted(edges[node]):
            if state.get(dep) == 1:
                cycles.append(" -> ".join(path[path.index(dep):] + [dep]))
            elif dep not in state:
                visit(dep, path + [dep])
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    return cycles


def test_no_import_cycles():
    assert import_cycles() == []


def plant(monkeypatch, planted: pathlib.Path, line: str) -> None:
    """Have the checker read PLANTED with LINE added at its end."""
    text = planted.read_text() + f"\n{line}\n"
    monkeypatch.setattr(pathlib.Path, "read_text",
                        lambda self, *a, **k: text if self == planted
                        else pathlib.Path.open(self).read())


def test_the_checker_sees_a_planted_upward_import(monkeypatch):
    """The rules above must be able to fail: a kernel module importing the
    CLI is caught."""
    plant(monkeypatch, ROOT / "kernel" / "netns.py", "from pyxdp.cli import render")
    assert "pyxdp.cli.render" in graph()["pyxdp.kernel.netns"]
    try:
        test_every_import_points_down_or_sideways_within_a_package()
    except AssertionError as exc:
        assert "pyxdp.kernel.netns imports pyxdp.cli.render" in str(exc)
    else:
        raise AssertionError("a planted upward import went unnoticed")


def test_the_checker_sees_a_planted_cycle(monkeypatch):
    """The cycle rule must be able to fail too: aio importing the socket
    that imports it (the circle its Protocol replaced) is caught."""
    plant(monkeypatch, ROOT / "xsk" / "aio.py", "from pyxdp.xsk.socket import XskSocket")
    members = [set(cycle.split(" -> ")) for cycle in import_cycles()]
    assert {"pyxdp.xsk.aio", "pyxdp.xsk.socket"} in members, members
