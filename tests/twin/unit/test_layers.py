"""The twin's import rule (issue 22): its layers, as folders, import only downwards and no module imports itself
back through others.

    machinery  <-  apiserver, redfish  <-  kube  <-  operators  <-  harness  <-  composition root

A module may import modules of its own layer and of the layers below it; ``apiserver`` and ``redfish`` sit side by
side and do not import each other; nothing imports the composition root (the top-level modules: ``cli``,
``estimate``, ``process``, ``__main__``) except the root itself. Imports under ``if TYPE_CHECKING:`` and inside
functions count as well: mypy follows them, and a deferred import is still a dependency.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping, Set
from pathlib import Path

PACKAGE = "gpufleet_twin"
SOURCE = Path(__file__).resolve().parents[3] / "twin" / "src" / PACKAGE

ROOT = "root"
# Each layer and the layers it may import (its own included).
MAY_IMPORT: dict[str, frozenset[str]] = {
    "machinery": frozenset({"machinery"}),
    "apiserver": frozenset({"machinery", "apiserver"}),
    "redfish": frozenset({"machinery", "redfish"}),
    "kube": frozenset({"machinery", "apiserver", "kube"}),
    "operators": frozenset({"machinery", "apiserver", "kube", "operators"}),
    "harness": frozenset({"machinery", "apiserver", "redfish", "kube", "operators", "harness"}),
    ROOT: frozenset({"machinery", "apiserver", "redfish", "kube", "operators", "harness", ROOT}),
}
ROOT_MODULES = {PACKAGE, f"{PACKAGE}.__main__", f"{PACKAGE}.cli", f"{PACKAGE}.estimate", f"{PACKAGE}.process"}


def _module_name(path: Path) -> tuple[str, bool]:
    parts = [PACKAGE, *path.relative_to(SOURCE).with_suffix("").parts]
    is_package = parts[-1] == "__init__"
    return ".".join(parts[:-1] if is_package else parts), is_package


def _imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known: Set[str]) -> Iterator[str]:
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    base = node.module or ""
    if node.level:
        anchor = module.split(".") if is_package else module.split(".")[:-1]
        anchor = anchor[: len(anchor) - (node.level - 1)]
        base = ".".join([*anchor, base] if base else anchor)
    for alias in node.names:
        submodule = f"{base}.{alias.name}"
        yield submodule if submodule in known else base


def import_graph() -> dict[str, set[str]]:
    """Every twin module and the twin modules it imports (at any place in the file)."""
    sources = {_module_name(path): path for path in sorted(SOURCE.rglob("*.py"))}
    known = {name for name, _ in sources}
    graph: dict[str, set[str]] = {}
    for (module, is_package), path in sources.items():
        edges = graph.setdefault(module, set())
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                edges.update(
                    name
                    for name in _imported(node, module, is_package, known)
                    if (name == PACKAGE or name.startswith(f"{PACKAGE}.")) and name != module
                )
    return graph


def layer_of(module: str) -> str:
    if module in ROOT_MODULES:
        return ROOT
    layer = module.split(".")[1]
    if layer not in MAY_IMPORT:
        raise AssertionError(f"{module} is in no layer: put it in one of {sorted(MAY_IMPORT)} (twin/README.md)")
    return layer


def layer_violations(graph: Mapping[str, Set[str]]) -> list[str]:
    return sorted(
        f"{module} ({layer_of(module)}) imports {target} ({layer_of(target)})"
        for module, targets in graph.items()
        for target in targets
        if layer_of(target) not in MAY_IMPORT[layer_of(module)]
    )


def import_cycles(graph: Mapping[str, Set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in graph.get(module, ()):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(cycles)


def test_every_module_is_in_a_layer_and_imports_only_its_own_and_lower_layers():
    graph = import_graph()
    assert f"{PACKAGE}.machinery.store" in graph[f"{PACKAGE}.operators.gpu_operator"]
    assert layer_violations(graph) == []


def test_no_import_circle_anywhere_in_the_twin():
    assert import_cycles(import_graph()) == []


def test_the_checks_catch_an_upward_import_a_circle_and_an_import_of_the_composition_root():
    graph = {
        f"{PACKAGE}.kube.kubelet": {f"{PACKAGE}.operators.olm"},
        f"{PACKAGE}.operators.olm": {f"{PACKAGE}.operators.sriov", f"{PACKAGE}.machinery.store"},
        f"{PACKAGE}.operators.sriov": {f"{PACKAGE}.operators.olm"},
        f"{PACKAGE}.apiserver.server": {f"{PACKAGE}.redfish.service"},
        f"{PACKAGE}.harness.build": {f"{PACKAGE}.cli"},
    }
    assert layer_violations(graph) == [
        f"{PACKAGE}.apiserver.server (apiserver) imports {PACKAGE}.redfish.service (redfish)",
        f"{PACKAGE}.harness.build (harness) imports {PACKAGE}.cli (root)",
        f"{PACKAGE}.kube.kubelet (kube) imports {PACKAGE}.operators.olm (operators)",
    ]
    assert import_cycles(graph) == [[f"{PACKAGE}.operators.olm", f"{PACKAGE}.operators.sriov"]]
