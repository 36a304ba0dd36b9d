"""vramplan's estimate of a kit case, through `vramplan estimate --json` run in-process (vramplan.cli.parser.run),
the command a user would type: ``vramplan estimate --hf-config CONFIG.json --set table.key=value ... --json``.

Where vramplan is not installed (the GPU machine: only the repository travels there), it is imported from this
checkout (`importable`): the repository root's folders are vramplan's sub-packages (pyproject.toml's package-dir).
The estimate's dependencies (pydantic, tomli-w) must be importable; when they are not, `load` says why and the kit
records no estimate.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from gpu_plans import future_sets, plan_data
from gpu_results import compared

ROOT = Path(__file__).resolve().parents[2]


def _import_estimate() -> None:
    """Every module `vramplan estimate` imports (ImportError when one of them, or a dependency, is missing)."""
    import vramplan.cli.parser
    import vramplan.core.files.planio
    import vramplan.core.memory.peak
    import vramplan.core.time.step  # noqa: F401


def importable() -> str | None:
    """Make `vramplan` importable: installed (editable or a wheel), else this checkout laid out as the install maps
    it (pyproject.toml's package-dir: the package is entry/, vramplan.core is core/, vramplan.measure is measure/,
    ...). None when it is, else the reason it is not. The kit measures through `vramplan.measure` (gpu_train.py)."""
    try:
        import vramplan  # noqa: F401 - installed
    except ImportError:
        init = ROOT / "entry" / "__init__.py"
        if not init.is_file() or not (ROOT / "measure" / "__init__.py").is_file():
            return f"vramplan is not installed, and {ROOT} is not its checkout"
        spec = importlib.util.spec_from_file_location(
            "vramplan", init, submodule_search_locations=[str(ROOT / "entry"), str(ROOT)]
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["vramplan"] = module
        spec.loader.exec_module(module)
    return None


def load() -> str | None:
    """Make vramplan's estimate importable (`importable`, then its modules); None when it is, else the reason."""
    why = importable()
    if why:
        return why
    try:
        _import_estimate()
    except ImportError as exc:
        return f"vramplan's estimate cannot be imported: {exc} (bench/measure/gpu_wheels.sh brings its wheels)"
    return None


def _literal(v: Any) -> str:
    """A TOML literal for ``--set`` (a bare word is a string)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(json.dumps(x) for x in v) + "]"
    return str(v)


def set_args(plan: dict[str, Any]) -> list[str]:
    """``--set table.key=value`` for every key of the plan data's hardware, training and strategy tables."""
    out: list[str] = []
    for table in ("hardware", "training", "strategy"):
        for key, value in plan[table].items():
            out += ["--set", f"{table}.{key}={_literal(value)}"]
    return out


def argv(c: dict[str, Any], config_path: str, gpu: str, extra: dict[str, Any] | None = None) -> list[str]:
    """The `vramplan` arguments (after the program name) that estimate resolved case `c`."""
    sets = set_args(plan_data(c, gpu))
    for key, value in (extra or {}).items():
        sets += ["--set", f"{key}={_literal(value)}"]
    return ["estimate", "--hf-config", config_path, *sets, "--json"]


def _run(args: list[str]) -> tuple[int, str, str]:
    from vramplan.cli.parser import run

    out, err = io.StringIO(), io.StringIO()
    saved = {k: os.environ.get(k) for k in ("VRAMPLAN_DETECT", "VRAMPLAN_CONFIG_DIR")}
    with tempfile.TemporaryDirectory() as empty:
        # the plan names its GPU; no detection, and no user presets that could shadow a built-in one
        os.environ["VRAMPLAN_DETECT"], os.environ["VRAMPLAN_CONFIG_DIR"] = "0", empty
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = run(args)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    return code, out.getvalue(), err.getvalue()


def estimate(c: dict[str, Any], gpu: str = "h200") -> dict[str, Any]:
    """vramplan's estimate of resolved case `c` on one `gpu`: the compared figures (gpu_results.compared), the
    verdict, the step time, and which of the case's future keys this vramplan accepted. Raises RuntimeError with
    vramplan's one-line error when the plan is refused."""
    from vramplan import __version__

    with tempfile.TemporaryDirectory() as d:
        cfg = Path(d) / "config.json"
        cfg.write_text(json.dumps(c["hf_config"]))
        code, out, err = _run(argv(c, str(cfg), gpu))
        if code:
            raise RuntimeError(err.strip() or f"vramplan estimate exited {code}")
        accepted: dict[str, Any] = {}
        for key, value in future_sets(c).items():
            trial = {**accepted, key: value}
            tcode, tout, _ = _run(argv(c, str(cfg), gpu, trial))
            if tcode == 0:
                accepted, out = trial, tout
    data = json.loads(out)
    mem, tm = data["memory"], data["time"]
    figs = compared(mem["per_gpu"], mem.get("overhead_terms", {}))
    return {
        "vramplan": __version__,
        "command": "vramplan " + " ".join(argv(c, "CONFIG.json", gpu, accepted)),
        "future_sets_accepted": accepted,
        "allocated": figs["allocated"],
        "reserved": figs["reserved"],
        "total": figs["total"],
        "sources": figs["sources"],
        "per_gpu": mem["per_gpu"],
        "overhead_terms": mem.get("overhead_terms", {}),
        "fits": mem["fits"],
        "gpu_capacity": mem["gpu_capacity"],
        "peak_phase": mem["peak_phase"],
        "params_total": data["parameters"]["total"],
        "params_trainable": data["parameters"]["trainable"],
        "step_seconds": tm["step_seconds"],
        "tokens_per_second_per_gpu": tm["tokens_per_second_per_gpu"],
        "mfu": tm.get("mfu"),
    }
