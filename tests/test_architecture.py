"""The shape of the code base, checked: no import circles, no module over 400 lines.

The import graph is read from the source (``ast``; nothing is imported): every
``import``/``from ... import`` of the project's packages, at any depth of a module
(function-level imports are dependencies too), except those under
``if TYPE_CHECKING:`` (annotations only). Two graphs must be acyclic: modules, and
the subpackages that are layers of their own (server, telephony, realtime, bench,
deploy, cli, and the clients).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("voice_pipeline", "asr", "llm", "tts", "vad", "clients")
#: layers: a module belongs to the first of these prefixes it starts with
LAYERS = (
    "voice_pipeline.conversation",
    "voice_pipeline.turntaking",
    "voice_pipeline.ledger",
    "voice_pipeline.server",
    "voice_pipeline.telephony",
    "voice_pipeline.realtime",
    "voice_pipeline.bench",
    "voice_pipeline.deploy",
    "voice_pipeline.cli",
    "clients",
)
MAX_LINES = 400
#: the core of a conversation: who has the floor, the runtime that carries it out, the ledger
CORE = (
    "voice_pipeline.turntaking",
    "voice_pipeline.conversation",
    "voice_pipeline.ledger",
    "voice_pipeline.tools",
)
#: ways in and out (protocols, the file runner), and the command line: the core knows none of them
EDGES = (
    "voice_pipeline.edge",
    "voice_pipeline.server",
    "voice_pipeline.telephony",
    "voice_pipeline.realtime",
    "voice_pipeline.wire",
    "voice_pipeline.bench",
    "voice_pipeline.deploy",
    "voice_pipeline.runner",
    "voice_pipeline.cli",
    "voice_pipeline.doctor",
    "clients",
)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


def _resolve(name: str) -> str | None:
    """The project module ``name`` refers to (a module, or a name inside one), if any."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        candidate = ".".join(parts[:i])
        if candidate in MODULES:
            return candidate
    return None


def imports_of(module: str) -> set[str]:
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for other in child.orelse:
                    visit(other)
                continue
            if isinstance(child, ast.Import):
                found.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")[: len(package.split(".")) - child.level + 1]
                    source = ".".join([*base, *([child.module] if child.module else [])])
                else:
                    source = child.module or ""
                found.add(source)
                found.update(f"{source}.{alias.name}" for alias in child.names)
            visit(child)

    visit(tree)
    return {m for name in found if (m := _resolve(name)) is not None and m != module}


GRAPH = {m: imports_of(m) for m in MODULES}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
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
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        comp.append(top)
                        if top == node:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
                continue
            if child not in graph:
                continue
            if child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return out


def layer(module: str) -> str:
    return next((p for p in LAYERS if module == p or module.startswith(p + ".")), module)


def test_the_tool_finds_a_circle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_import_circle() -> None:
    assert cycles(GRAPH) == []


def test_no_circle_between_layers() -> None:
    layers: dict[str, set[str]] = {}
    for module, deps in GRAPH.items():
        mine = layer(module)
        layers.setdefault(mine, set()).update(layer(d) for d in deps if layer(d) != mine)
    assert cycles(layers) == []


def _under(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _under(m, CORE)))
def test_the_core_imports_no_edge_and_no_cli(module: str) -> None:
    assert sorted(d for d in GRAPH[module] if _under(d, EDGES)) == []


def test_the_turn_machine_is_below_the_runtime_and_the_ledger() -> None:
    """Layers inside the core: turn-taking knows neither the runtime nor the ledger;
    the ledger does not know the runtime."""
    below = {"voice_pipeline.turntaking": ("voice_pipeline.conversation", "voice_pipeline.ledger")}
    below["voice_pipeline.ledger"] = ("voice_pipeline.conversation",)
    for package, above in below.items():
        for module in (m for m in MODULES if _under(m, (package,))):
            assert sorted(d for d in GRAPH[module] if _under(d, above)) == [], module


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_over_400_lines(module: str) -> None:
    lines = len(MODULES[module].read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{MODULES[module].relative_to(ROOT)}: {lines} lines"
