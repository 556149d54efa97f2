"""The import graph of gazette/broker/ has no cycle (issue 24, item 2): the stream handlers depend on
the narrow `BrokerContext` (broker/context.py), never on `broker.py`, which imports them.

Every import counts, those under `if TYPE_CHECKING:` and inside functions included: a cycle among
annotations is still a cycle among modules. Run as a script to print the edges:
`python tests/broker/test_import_graph.py`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import gazette.broker

PACKAGE = "gazette.broker"
BROKER_DIR = Path(gazette.broker.__file__).parent


def _targets(node: ast.AST) -> list[str]:
    """The gazette.broker modules one import statement names."""
    names: list[str] = []
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        if node.module == PACKAGE:  # from gazette.broker import flow
            names = [f"{PACKAGE}.{a.name}" for a in node.names]
        else:
            names = [node.module]
    prefix = PACKAGE + "."
    return sorted({n[len(prefix) :].split(".")[0] for n in names if n.startswith(prefix)})


def import_graph(directory: Path = BROKER_DIR) -> dict[str, set[str]]:
    """Module name (without the package) -> the package's modules it imports."""
    modules = {p.stem for p in directory.glob("*.py") if p.stem != "__init__"}
    graph: dict[str, set[str]] = {}
    for module in sorted(modules):
        tree = ast.parse((directory / f"{module}.py").read_text())
        graph[module] = {t for node in ast.walk(tree) for t in _targets(node) if t in modules and t != module}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as a path [a, b, ..., a], or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)) is not None:
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)) is not None:
            return cycle
    return None


def test_the_broker_package_has_no_import_cycle() -> None:
    graph = import_graph()
    assert "broker" in graph and "replicate" in graph  # the walk found the package
    cycle = find_cycle(graph)
    assert cycle is None, f"import cycle in gazette/broker: {' -> '.join(cycle or [])}"


def test_no_stream_handler_imports_the_broker() -> None:
    graph = import_graph()
    for handler in ("append", "read", "replicate", "journals", "pipeline", "proxy", "replica", "resolver"):
        assert "broker" not in graph[handler], (
            f"broker/{handler}.py imports broker.py (use broker/context.py)"
        )


def test_find_cycle_finds_one() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"b"}}) is None


if __name__ == "__main__":
    g = import_graph()
    for src in sorted(g):
        for dst in sorted(g[src]):
            print(f"{src} -> {dst}")
    print("cycle:", " -> ".join(find_cycle(g) or ["none"]))
