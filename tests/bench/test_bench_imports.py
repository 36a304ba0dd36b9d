"""bench/ never reaches into tests/ (issue 31.7): no script of bench/ imports the test suite's modules; what both
need lives in bench/ (bench.data.published_rows, bench.data.published_configs) or in the package."""

from __future__ import annotations

import ast
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_no_bench_script_imports_the_tests() -> None:
    found = []
    for path in sorted(BENCH.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            found += [f"{path.relative_to(BENCH)}: {n}" for n in names if n.split(".")[0] == "tests"]
    assert not found, found
