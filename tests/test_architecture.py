"""The installed package's architecture: one name, layers that import one way, no cycles, no private names taken
across modules, core free of Textual and Rich, and a headless CLI that never loads them.

The scan reads every module of the installed `vramplan` (wherever pip put it: `tests.installed`, the map that
mypy's test uses too) with `ast`, counting imports inside functions too. Imports under ``if TYPE_CHECKING:`` never
run, so the checks of what loads leave them out; the cycle check counts them (a reader follows them as any import,
and a cycle through them is a cycle of concepts).
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests import installed
from tests.scripts import APP_RUN_REPLACED

# Lower layers first: a module may import its own layer and the ones before it, never a later one. core/plan's own
# modules (describe, keys, resolved, ...) stand above its sub-packages: they read a whole plan.
CORE_LAYERS = (
    "vramplan.core.plan.helpers",
    "vramplan.core.plan.architecture",
    "vramplan.core.plan.catalogue",
    "vramplan.core.plan.stack",
    "vramplan.core.plan.schema",
    "vramplan.core.plan",
    "vramplan.core.memory",
    "vramplan.core.time",
    "vramplan.core.advice",
    "vramplan.core.files",
)
FRONT_ENDS = ("vramplan.cli", "vramplan.tui")
MODULES = installed.modules()  # name -> file, wherever pip put it (tests/installed.py)


def _type_checking_blocks(tree: ast.Module) -> set[int]:
    """Line numbers of the statements under ``if TYPE_CHECKING:``."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for stmt in node.body:
                lines.update(range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1))
    return lines


def _imports(name: str, typing_too: bool = False) -> list[tuple[str, str | None, int]]:
    """(imported module, imported name or None, line) for every import of a vramplan module that runs (with
    ``typing_too``, those under ``if TYPE_CHECKING:`` as well)."""
    path = MODULES[name]
    tree = ast.parse(path.read_text(), str(path))
    skip = set() if typing_too else _type_checking_blocks(tree)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: list[tuple[str, str | None, int]] = []
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            out += [(a.name, None, node.lineno) for a in node.names if a.name.split(".")[0] == "vramplan"]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            if base.split(".")[0] != "vramplan":
                continue
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.append((sub, None, node.lineno) if sub in MODULES else (base, a.name, node.lineno))
    return out


GRAPH = {m: sorted({target for target, _, _ in _imports(m)} - {m}) for m in MODULES}
# Every import, those under TYPE_CHECKING too: what a reader follows
READ_GRAPH = {m: sorted({target for target, _, _ in _imports(m, typing_too=True)} - {m}) for m in MODULES}


def _cycles(graph: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one node."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return cycles


def _layer(module: str) -> int | None:
    for i, prefix in enumerate(CORE_LAYERS):
        if module == prefix or module.startswith(prefix + "."):
            return i
    return None


def test_the_package_is_one_name_with_the_repository_folders_inside() -> None:
    for sub in ("vramplan.core", "vramplan.cli", "vramplan.tui", "vramplan.presets", "vramplan.core.plan"):
        assert sub in MODULES
    assert len(MODULES) > 60, sorted(MODULES)


def test_no_import_cycles() -> None:
    """No module reaches itself through imports, those under TYPE_CHECKING included."""
    assert _cycles(READ_GRAPH) == []


def test_no_private_name_is_taken_across_modules() -> None:
    taken = []
    for m in MODULES:
        for target, name, line in _imports(m):
            if name is not None and name.startswith("_") and not name.startswith("__") and target != m:
                taken.append(f"{m}:{line} takes {target}.{name}")
        tree = ast.parse(MODULES[m].read_text())
        imported = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
        for node in ast.walk(tree):  # module._private through an imported module
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in imported
                and f"{_import_base(tree, node.value.id)}" in MODULES
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                taken.append(f"{m}:{node.lineno} uses {node.value.id}.{node.attr}")
    assert not taken, taken


def _import_base(tree: ast.Module, alias: str) -> str:
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom) and n.module:
            for a in n.names:
                if (a.asname or a.name) == alias:
                    return f"{n.module}.{a.name}"
    return ""


def test_core_layers_import_one_way() -> None:
    wrong = []
    for m, targets in GRAPH.items():
        mine = _layer(m)
        for t in targets:
            if m.startswith("vramplan.core") and t.startswith(FRONT_ENDS):
                wrong.append(f"{m} -> {t} (core never imports a front end)")
            if m.startswith("vramplan.core") and t.startswith("vramplan.machine"):
                wrong.append(f"{m} -> {t} (core reads no machine; vramplan.machine serves the front ends)")
            if m.startswith("vramplan.machine") and t.startswith(FRONT_ENDS):
                wrong.append(f"{m} -> {t} (the machine package never imports a front end)")
            theirs = _layer(t)
            if mine is not None and theirs is not None and theirs > mine:
                wrong.append(f"{m} -> {t} ({CORE_LAYERS[mine]} is below {CORE_LAYERS[theirs]})")
    assert not wrong, wrong


def test_front_ends_stand_beside_each_other() -> None:
    """The CLI and the TUI both build on core; neither imports the other (only ``vramplan.__main__`` picks one)."""
    wrong = [
        f"{m} -> {t}"
        for m, targets in GRAPH.items()
        for t in targets
        if (m.startswith("vramplan.cli") and t.startswith("vramplan.tui"))
        or (m.startswith("vramplan.tui") and t.startswith("vramplan.cli"))
    ]
    assert not wrong, wrong


# The one exception: `vramplan help` on a terminal renders its page with Rich (installed with Textual), imported
# inside the function that does it, so no other command and no pipe loads it (tests/cli/test_help_cli.py).
LAZY_RICH = {"vramplan.cli.helptopics"}


@pytest.mark.parametrize("package", ["vramplan.core", "vramplan.cli"])
def test_core_and_cli_sources_never_import_textual_or_rich(package: str) -> None:
    for m, path in MODULES.items():
        if not m.startswith(package):
            continue
        tree = ast.parse(path.read_text())
        if m in LAZY_RICH:  # its module level imports neither; its functions may import rich, never textual
            tree = ast.Module(body=[n for n in tree.body if not isinstance(n, ast.FunctionDef)], type_ignores=[])
        for node in ast.walk(tree):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            assert not any(n.split(".")[0] in ("textual", "rich") for n in names), (m, names)


def test_core_starts_no_process() -> None:
    """core/ is the pure domain: no module of it imports subprocess or multiprocessing, nor calls os.system,
    os.popen, os.fork, os.exec* or os.spawn* (running nvidia-smi is `vramplan.machine.nvidia_smi`' job)."""
    found = []
    for m, path in MODULES.items():
        if not m.startswith("vramplan.core"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "os":
                names = [f"os.{node.attr}"]
            else:
                continue
            for n in names:
                if n.split(".")[0] in ("subprocess", "multiprocessing") or n.startswith(
                    ("os.system", "os.popen", "os.fork", "os.exec", "os.spawn", "os.posix_spawn")
                ):
                    found.append((m, n))
    assert not found, found


def test_importing_every_core_module_loads_neither_textual_nor_rich() -> None:
    modules = sorted(m for m in MODULES if m.startswith(("vramplan.core", "vramplan.cli", "vramplan.presets")))
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('textual', 'rich')]\n"
        "assert not bad, bad\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_package_inits_are_light() -> None:
    """Importing the package and its sub-packages imports no pydantic and no estimator (``vramplan --help`` stays
    fast): every ``__init__`` is a docstring, a version, or nothing."""
    packages = sorted(m for m, p in MODULES.items() if p.name == "__init__.py")
    code = (
        "import importlib, sys\n"
        f"for m in {packages!r}: importlib.import_module(m)\n"
        "heavy = [m for m in sys.modules if m.split('.')[0] in ('pydantic', 'pydantic_core', 'textual', 'tomli_w')]\n"
        "heavy += [m for m in sys.modules if m.startswith('vramplan.') and m not in " + repr(packages) + "]\n"
        "assert not heavy, heavy\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["estimate", "--bogus"], ["estimate", "--help"]])
def test_trivial_commands_import_neither_pydantic_nor_the_estimator(argv: list[str]) -> None:
    code = (
        "import sys\n"
        "from vramplan.__main__ import main\n"
        f"try:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in sys.modules if m.split('.')[0] in ('pydantic', 'pydantic_core', 'textual', 'rich')]\n"
        "heavy += [m for m in sys.modules if m.startswith(('vramplan.core.memory', 'vramplan.core.plan.schema'))]\n"
        "assert not heavy, heavy\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_python_dash_m_vramplan_runs() -> None:
    r = subprocess.run([sys.executable, "-m", "vramplan", "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "estimate" in r.stdout, r.stderr


def test_the_command_names_are_the_parsers_subcommands() -> None:
    from vramplan.cli import COMMANDS
    from vramplan.cli.parser import build_parser

    listed = re.findall(r"^    (\w+)  ", build_parser().format_help(), re.MULTILINE)  # the help's command list
    assert listed == list(COMMANDS)


def test_the_planners_start_imports_no_command() -> None:
    """``vramplan`` with no command opens the planner: argparse and the commands are not imported (9M instructions)."""
    code = (
        "import os, sys\n"
        "os.environ['VRAMPLAN_DETECT'] = '0'\n" + APP_RUN_REPLACED + "from vramplan.__main__ import main\n"
        "assert main([]) == 0\n"
        "loaded = [m for m in sys.modules if m in ('argparse', 'vramplan.cli.parser', 'vramplan.cli.importing')]\n"
        "assert not loaded, loaded\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("command", [True, False])
def test_the_command_skips_pydantic_plugin_discovery_a_library_user_keeps_it(tmp_path: Path, command: bool) -> None:
    """``vramplan`` turns pydantic's plugin discovery off in its own process (it reads every installed package's
    entry points: 3-11 ms); a program importing vramplan's core keeps its plugins."""
    info = tmp_path / "fakeplug-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fakeplug\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[pydantic]\nfake = fakeplug_mod:plugin\n")
    (tmp_path / "fakeplug_mod.py").write_text(
        "import os\nos.environ['FAKEPLUG_LOADED'] = '1'\n"
        "class Plugin:\n    def new_schema_validator(self, *args, **kw):\n        return None, None, None\n"
        "plugin = Plugin()\n"
    )
    start = (
        APP_RUN_REPLACED + "from vramplan.__main__ import main\nassert main([]) == 0\n"
        if command
        else "from vramplan.core.plan.schema.plan import default_plan\ndefault_plan()\n"
    )
    code = f"import os, sys\nsys.path.insert(0, {str(tmp_path)!r})\nos.environ['VRAMPLAN_DETECT'] = '0'\n{start}"
    code += "print(os.environ.get('FAKEPLUG_LOADED', '0'), os.environ.get('PYDANTIC_DISABLE_PLUGINS'))\n"
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == (["0", "__all__"] if command else ["1", "None"])
