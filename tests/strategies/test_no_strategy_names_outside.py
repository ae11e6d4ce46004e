"""Nothing in simdl/ outside simdl/strategies/ compares strategy names: callers ask the
registry (simdl.strategies.registry), so a new strategy needs no edit elsewhere.

Read from the syntax tree of every module: a comparison (``==``, ``!=``, ``in``, ``not in``)
with a strategy name or label as one side or inside a tuple/list/set on one side, and
``startswith``/``endswith`` with a strategy prefix, are reported with file and line.
"""

from __future__ import annotations

import ast
from pathlib import Path

from simdl.strategies import registry

SIMDL = Path(__file__).resolve().parents[2] / "simdl"
PREFIXES = ("ps", "ps-", "fsdp", "fsdp-", "ddp")
# Modules that drive real PyTorch (not simdl's model of it): they must choose which torch
# wrapper to build, as validate/train.py does.
REAL_TORCH = {"simdl/memory/reference.py"}


def _words() -> set[str]:
    return set(registry.names()) | set(registry.labels())


def _names_in(node: ast.AST, words: set[str]) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in words:
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [w for e in node.elts for w in _names_in(e, words)]
    return []


def strategy_comparisons(source: str, path: str) -> list[str]:
    words = _words()
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            hits = [w for side in [node.left, *node.comparators] for w in _names_in(side, words)]
            if hits:
                found.append(f"{path}:{node.lineno}: compares with {', '.join(map(repr, hits))}")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("startswith", "endswith")
            and node.args
        ):
            arg = node.args[0]
            values = (
                [arg.value]
                if isinstance(arg, ast.Constant)
                else [e.value for e in getattr(arg, "elts", ()) if isinstance(e, ast.Constant)]
            )
            hits = [v for v in values if v in PREFIXES]
            if hits:
                found.append(f"{path}:{node.lineno}: {node.func.attr}({', '.join(map(repr, hits))})")
    return found


def test_the_check_finds_a_comparison():
    src = 'if plan.strategy == "ps-sync" or name in ("ddp", "x") or s.startswith("fsdp-"):\n    pass\n'
    assert len(strategy_comparisons(src, "x.py")) == 3
    assert strategy_comparisons('if "ps" in stages: pass\nd = {"ddp": 1}\n', "x.py") == []


def test_no_strategy_name_comparisons_outside_the_strategies_package():
    found = []
    for path in sorted(SIMDL.rglob("*.py")):
        rel = path.relative_to(SIMDL.parent)
        if rel.parts[1] == "strategies" or rel.as_posix() in REAL_TORCH:
            continue
        found += strategy_comparisons(path.read_text(), str(rel))
    assert not found, "\n".join(found)
