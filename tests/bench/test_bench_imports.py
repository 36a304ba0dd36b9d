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


# bench/measure keeps research and data scripts; what `vramplan measure` already does (model building, the step's
# forward, saved-tensor accounting, the profiler's analysis, CUDA readings, storage counting, versions) it imports
# from vramplan.measure (issue 37.5). A script's function that bears the name of a public one of the package is a
# copy unless it is listed here with what makes it the script's own (top-level names; a method's body is compared by
# the second test).
MEASURE = BENCH.parent / "measure"
SCRIPTS = BENCH / "measure"
OWN: dict[tuple[str, str], str] = {
    ("measure_step.py", "build"): "the oracle's case built directly on the CPU (its random weights and losses)",
    ("measure_step.py", "autocast"): "the oracle's precision key -> vramplan.measure.forward.autocast_to",
    ("measure_step.py", "analyse"): "vramplan.measure.cpu's figures reshaped as the oracle's truth.json dicts",
    ("measure_step.py", "saved_pass"): "a fresh build of the case, then vramplan.measure.saved.saved_pass",
    ("measure_rl.py", "saved_pass"): "TRL's compute_loss under vramplan.measure.saved.SavedTensors",
    ("rl_probe.py", "analyse"): "vramplan.measure.cpu.events with the innermost of nested trainer ranges",
    ("rl_probe.py", "summarise"): "vramplan.measure.saved.summarise's keys of rl_truth.json, TRL's head rule",
    ("gpu_train.py", "build"): "the kit's model built directly on the device, 4-bit quantized for QLoRA",
    ("gpu_train.py", "CudaMeter"): "the kit's spans over vramplan.measure.cuda.CudaMeter, context and retries",
    ("gpu_measure.py", "versions"): "vramplan.measure.run.versions with vramplan's and bitsandbytes'",
}


def _defs(tree: ast.AST) -> list[ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef]:
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]


def _public_names() -> set[str]:
    """The public top-level functions and classes of vramplan.measure's modules."""
    names = set()
    for path in MEASURE.glob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        names |= {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    return {n for n in names if not n.startswith("_")}


class _Anonymous(ast.NodeTransformer):
    """Every name (a local, a global, a called function's) and argument made ``_``, so that a copy with renamed
    variables compares equal; attributes (``torch.cuda.max_memory_allocated``) and constants stay."""

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return ast.copy_location(ast.Name(id="_", ctx=node.ctx), node)

    def visit_arg(self, node: ast.arg) -> ast.AST:
        return ast.copy_location(ast.arg(arg="_"), node)


def _body(fn: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> str:
    body = (
        fn.body[1:]
        if fn.body and isinstance(fn.body[0], ast.Expr) and isinstance(fn.body[0].value, ast.Constant)
        else fn.body
    )
    return ast.dump(_Anonymous().visit(ast.Module(body=list(body), type_ignores=[])), annotate_fields=False)


def test_bench_measure_defines_no_function_of_the_package_again() -> None:
    public = _public_names()
    assert {"storage_bytes", "saved_pass", "forward_loss", "nvidia_smi_process_bytes", "CudaMeter"} <= public
    found, seen = [], set()
    for path in sorted(SCRIPTS.glob("*.py")):
        for node in ast.parse(path.read_text(), str(path)).body:
            if not isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                continue
            key = (path.name, node.name)
            if node.name in public and key not in OWN:
                found.append(f"bench/measure/{path.name}: {node.name} (vramplan.measure has one: import it)")
            seen.add(key)
    assert not found, found
    assert not set(OWN) - seen, f"OWN lists what bench/measure no longer defines: {sorted(set(OWN) - seen)}"


def test_bench_measure_has_no_copy_of_a_package_function_under_another_name() -> None:
    """Every function and method of bench/measure against every one of vramplan.measure, with local names and
    docstrings left out: none of more than a few lines is the same."""
    package = {}
    for path in MEASURE.glob("*.py"):
        for node in _defs(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ClassDef) and len(node.body) > 2:
                package[_body(node)] = f"measure/{path.name}: {node.name}"
    copies = []
    for path in sorted(SCRIPTS.glob("*.py")):
        for node in _defs(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ClassDef) and _body(node) in package:
                copies.append(f"bench/measure/{path.name}: {node.name} = {package[_body(node)]}")
    assert not copies, copies
