"""Every path a formula's source names exists: this repository's own files (``core/memory/...``, ``tests/data``,
``../shared/oracle``) in the checkout, a framework's file (``torch/utils/checkpoint.py``) in
tests/data/source_paths.json, which says in which repository and at which commit it was seen.

The sources are those an estimate, a step time, an RL estimate, the stack's defaults and the checklist show, over
the 1,200 random plans of tests/data/behaviour_digest.json (bench/data/behaviour_digest.py) and every stack row."""

from __future__ import annotations

import json
import re
from functools import cache

from bench.data.behaviour_digest import documents
from tests.conftest import DATA, ROOT
from vramplan.core.advice.checklist import checklist
from vramplan.core.plan.schema.plan import default_plan
from vramplan.core.plan.stack.defaults import STACK_DEFAULTS

FOLDERS = "core|cli|tui|measure|bench|tests|docs|presets|machine|entry"
OWN = re.compile(rf"(?<![\w./-])((?:\.\./shared|{FOLDERS})/[\w/.-]*\w)")
FILE = re.compile(r"(?<![\w./-])([A-Za-z_][\w.-]*(?:/[\w.-]+)+\.(?:py|cpp|cu|cuh|h|md|json|yaml|toml))")


@cache
def cited_texts() -> frozenset[str]:
    texts: set[str] = {row.source for row in STACK_DEFAULTS}
    docs = documents()
    for _, text in docs:
        d = json.loads(text)
        texts |= {v["source"] for v in d["explain"].values()} | {v["formula"] for v in d["explain"].values()}
        texts |= {v["source"] for v in d["time"]["explain"].values()}
        for t in d["memory"].get("rl", {}).get("terms", {}).values():
            texts |= {t["source"], t["formula"]}
    base = default_plan()
    for changes, _ in docs[:60]:  # the checklist's items (their sources), on a sample of the plans
        texts |= {i["source"] for i in checklist(base.with_changes(changes)).to_json()["items"]}
    return frozenset(texts)


def test_this_repositorys_paths_exist() -> None:
    own = {p.rstrip(".") for t in cited_texts() for p in OWN.findall(t)}
    assert {"tests/data", "core/memory/activations/block.py"} <= own  # the scan finds them
    missing = sorted(p for p in own if not (ROOT / p).exists() and not p.startswith("../shared"))
    assert not missing, f"sources name files that do not exist: {missing}"


def test_every_framework_file_cited_was_seen_in_its_repository() -> None:
    seen = json.loads((DATA / "source_paths.json").read_text())["paths"]
    cited = {p for t in cited_texts() for p in FILE.findall(t) if not OWN.fullmatch(p)}
    assert "torch/utils/checkpoint.py" in cited
    unknown = sorted(cited - set(seen))
    assert not unknown, f"verify these in their repositories and add them to tests/data/source_paths.json: {unknown}"
    absent = sorted(p for p in cited if not seen[p]["exists"])
    assert not absent, f"sources name framework files that do not exist: {absent}"
