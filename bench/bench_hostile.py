"""How long hostile input takes to be refused (issue 39), against a generous bound: every command and the planner's
open dialog given a plan file of one dotted key of 100,000 parts (200 KB; ``tomllib``'s time grows with the square
of a key's parts, so the check runs before it parses). Each case is a cold process, as a user runs it; the bound is
the issue's 1 s for the refusal, over the time of the same command refusing a two-line plan file of an unknown
model (the process's start and imports, which a busy machine stretches: the difference is what the file costs).
Not a timed test (CI is a busy 2-core machine): run it by hand.

Usage: python -m bench.bench_hostile [ROUNDS] [--before]   (default 3 rounds; exit 1 if a case is over its bound;
--before also times ``tomllib`` alone on the table-header file, what every command spent before the check: ~10 s)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BOUND_S = 1.0  # the bound on a refusal, beyond the process's own start
DOTTED = ".".join(["a"] * 100_000)
FILES = {  # the four places a dotted key goes: a table header, a key/value pair, an array of tables, an inline table
    "table": f"[{DOTTED}]\n",
    "key": f'[model]\npreset = "llama-7b"\n{DOTTED} = 1\n',
    "array_table": f"[[{DOTTED}]]\n",
    "inline": f'[model]\npreset = "llama-7b"\n[training]\nx = {{{DOTTED} = 1}}\n',
}
GOOD = '[model]\npreset = "llama-7b"\n'
SMALL = '[model]\npreset = "no-such-model"\n'  # refused after the same imports: the floor


def commands(exe: str, plan: str, good: str) -> dict[str, list[str]]:
    """Every command that reads a plan file, given ``plan``."""
    return {
        "estimate": [exe, "estimate", plan],
        "check": [exe, "check", plan],
        "fit": [exe, "fit", plan],
        "gpus": [exe, "gpus", plan],
        "export": [exe, "export", plan, "-o", "-"],
        "diff": [exe, "diff", good, plan],
        "measure": [exe, "measure", plan, "--device", "cpu"],
        "estimate --calibration": [exe, "estimate", "--calibration", plan],
        "planner --calibration": [exe, "--calibration", plan],
    }


def seconds(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, int]:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, check=False, env=env, timeout=600)
    return time.perf_counter() - t0, r.returncode


async def open_dialog_s(path: Path) -> float:
    """Seconds from the open dialog's enter to its error line (the planner headless, 80x24)."""
    from textual.widgets import Input, Static

    from vramplan.tui.app import VramplanApp

    app = VramplanApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("ctrl+o")
        await pilot.pause()
        app.screen.query_one("#open-path", Input).value = str(path)
        start = time.perf_counter()
        await pilot.press("enter")
        error = app.screen.query_one("#open-error", Static)
        while not error.display:
            await asyncio.sleep(0.001)
        took = time.perf_counter() - start
        assert "dotted key" in str(error.render()), error.render()
    return took


def main() -> int:
    rounds = int(next((a for a in sys.argv[1:] if a.isdigit()), "3"))
    exe = shutil.which("vramplan") or "vramplan"
    over = []
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        good, small = d / "good.toml", d / "small.toml"
        good.write_text(GOOD)
        small.write_text(SMALL)
        if "--before" in sys.argv:
            import tomllib

            t0 = time.perf_counter()
            with contextlib.suppress(tomllib.TOMLDecodeError):
                tomllib.loads(FILES["table"])
            print(f"tomllib alone on the table-header file (before the check): {time.perf_counter() - t0:.2f} s")
        floor = {
            name: statistics.median(seconds(c)[0] for _ in range(rounds))
            for name, c in commands(exe, str(small), str(good)).items()
        }
        print(f"cold process, median of {rounds}; bound: the same command refusing a two-line plan + {BOUND_S:g} s")
        print(f"  {'command':<24} {'file':<12} {'refused in':>10} {'two lines':>10}")
        for kind, text in FILES.items():
            path = d / f"dotted_{kind}.toml"
            path.write_text(text)
            for name, cmd in commands(exe, str(path), str(good)).items():
                runs = [seconds(cmd) for _ in range(rounds)]
                med = statistics.median(t for t, _ in runs)
                codes = {code for _, code in runs}
                ok = med <= floor[name] + BOUND_S and codes == {2}
                over += [] if ok else [f"{name} {kind}"]
                print(f"  {name:<24} {kind:<12} {med:9.2f}s {floor[name]:9.2f}s  exit {codes}{'' if ok else '  OVER'}")
        # the file in the user presets folder: every command reads that folder
        config = d / "config"
        (config / "models").mkdir(parents=True)
        (config / "models" / "dotted.toml").write_text(FILES["table"])
        env = {**os.environ, "VRAMPLAN_CONFIG_DIR": str(config)}
        for name in ("presets", "estimate"):
            med = statistics.median(seconds([exe, name], env)[0] for _ in range(rounds))
            base = statistics.median(seconds([exe, name])[0] for _ in range(rounds))
            ok = med <= base + BOUND_S
            over += [] if ok else [f"{name} with the file in the presets folder"]
            print(f"  {name + ' (presets folder)':<37} {med:9.2f}s {base:9.2f}s{'' if ok else '  OVER'}")
        for kind in FILES:
            took = statistics.median(asyncio.run(open_dialog_s(d / f"dotted_{kind}.toml")) for _ in range(rounds))
            ok = took <= BOUND_S
            over += [] if ok else [f"open dialog {kind}"]
            print(f"  {'open dialog (enter -> error)':<24} {kind:<12} {took:9.3f}s{'' if ok else '  OVER'}")
    print("all within the bound" if not over else f"over the bound: {', '.join(over)}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
