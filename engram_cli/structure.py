"""``engram structure``: a package's import graph drawn as levels, measured, not guessed.

A module stands one level above everything it imports inside the package (a
module importing nothing there is level 1); modules that import each other in a
cycle share one level. Imports inside functions count (grimp reads them all).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Structure:
    package: str
    modules: dict[str, int]
    """module -> level (1 = imports nothing inside the package)."""
    lines: dict[str, int]
    imports: int
    """distinct module -> module imports inside the package."""
    top_level: list[str]
    """modules directly under the package (not in a sub-package)."""

    @property
    def levels(self) -> int:
        return max(self.modules.values(), default=0)


def _sccs(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's strongly connected components (iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[set[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: set[str] = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                out.append(component)
    return out


def _is_empty_init(path: Path) -> bool:
    """An ``__init__.py`` holding only a docstring or nothing is not a module of its own."""
    import ast

    if path.name != "__init__.py":
        return False
    body = ast.parse(path.read_text()).body
    return all(
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        or isinstance(node, ast.ImportFrom)
        and node.module == "__future__"
        for node in body
    )


def measure(package: str) -> Structure:
    import grimp

    top = package.split(".")[0]
    graph = grimp.build_graph(top, include_external_packages=False)
    root = Path(sys.modules[top].__file__ or "").parent if top in sys.modules else None
    if root is None:
        import importlib

        root = Path(importlib.import_module(top).__file__ or "").parent
    prefix = package + "."
    files: dict[str, Path] = {}
    for module in graph.modules:
        if module != package and not module.startswith(prefix):
            continue
        rel = module.split(".")[1:]
        path = root.joinpath(*rel)
        file = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        if file.exists() and not _is_empty_init(file):
            files[module] = file
    edges: dict[str, set[str]] = {m: set() for m in files}
    for module in files:
        for imported in graph.find_modules_directly_imported_by(module):
            if imported in files and imported != module:
                edges[module].add(imported)
    component_of: dict[str, int] = {}
    components = _sccs(edges)
    for i, component in enumerate(components):
        for member in component:
            component_of[member] = i
    # Tarjan emits components in reverse topological order: dependencies first.
    level: dict[int, int] = {}
    for i, component in enumerate(components):
        below = [
            level[component_of[dep]]
            for member in component
            for dep in edges[member]
            if component_of[dep] != i
        ]
        level[i] = 1 + max(below, default=0)
    depth = package.count(".") + 1
    return Structure(
        package=package,
        modules={m: level[component_of[m]] for m in sorted(files)},
        lines={m: len(f.read_text().splitlines()) for m, f in files.items()},
        imports=sum(len(v) for v in edges.values()),
        top_level=sorted(
            m for m, f in files.items() if m.count(".") == depth and f.name != "__init__.py"
        ),
    )


def _run(args: argparse.Namespace) -> int:
    s = measure(args.package)
    if args.json:
        print(
            json.dumps(
                {
                    "package": s.package,
                    "modules": len(s.modules),
                    "levels": s.levels,
                    "imports": s.imports,
                    "lines": sum(s.lines.values()),
                    "top_level": s.top_level,
                    "by_level": {
                        str(n): sorted(m for m, lv in s.modules.items() if lv == n)
                        for n in range(1, s.levels + 1)
                    },
                },
                indent=1,
            )
        )
        return 0
    print(
        f"{s.package}: {len(s.modules)} modules, {s.levels} levels, {s.imports} imports, "
        f"{sum(s.lines.values())} lines, {len(s.top_level)} modules at the top level"
    )
    for n in range(s.levels, 0, -1):
        names = sorted(m.removeprefix(s.package + ".") for m, lv in s.modules.items() if lv == n)
        print(f"  level {n:2d} ({len(names)}): {' '.join(names)}")
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "structure",
        help="draw a package's import graph as levels (modules, imports, lines)",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    p.add_argument("package", nargs="?", default="services.query")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_run)
