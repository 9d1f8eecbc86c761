"""Each component receives only its own config sections and engines (docs: STYLE.md, pattern 5).

The session is the composition root of a conversation: it alone (with the module that cuts
them up, conversation/wiring.py) holds the whole ``Config`` and the whole ``Engines``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WHOLE = {("voice_pipeline.config", "Config"), ("voice_pipeline.engines", "Engines")}
#: the modules allowed to hold the whole config and engines
ROOTS = {"session.py", "wiring.py"}

CONVERSATION = ROOT / "voice_pipeline" / "conversation"
PARTS = [
    *sorted(p for p in CONVERSATION.glob("*.py") if p.name not in ROOTS),
    ROOT / "voice_pipeline" / "realtime" / "bridge.py",
]


def whole_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            found += [f"{node.module}.{a.name}" for a in node.names if (node.module, a.name) in WHOLE]
    return found


@pytest.mark.parametrize("path", PARTS, ids=lambda p: p.name)
def test_a_part_imports_neither_the_whole_config_nor_the_engines(path: Path) -> None:
    assert whole_imports(path) == []


def test_the_composition_root_does() -> None:
    found = sorted(whole_imports(CONVERSATION / "session.py"))
    assert found == ["voice_pipeline.config.Config", "voice_pipeline.engines.Engines"]
