"""Issue 16, speed: what a cold start does before the first frame. Each test runs a fresh interpreter (what a test
process imported before would hide what the app imports)."""

from __future__ import annotations

import gc
import subprocess
import sys

from textual.screen import Screen

from tests.scripts import APP_RUN_REPLACED
from tests.waiting import HANG_S, until
from vramplan.tui.app import VramplanApp

# The start of a script that runs the app headless, at 80x24, in a fresh process (`run`): `main()` continues it.
STARTED = (
    "import asyncio, sys\n"
    "from vramplan.tui.app import VramplanApp\n"
    "async def main():\n"
    "    app = VramplanApp()\n"
    "    async with app.run_test(size=(80, 24)) as pilot:\n"
)


def run(code: str) -> None:
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_S)
    assert r.returncode == 0, r.stderr


def test_importing_the_app_runs_no_garbage_collection_and_freezes_what_it_made() -> None:
    """The collector is paused while the app's modules load (a full collection among their objects took 20-30 ms
    of a 0.45 s start; two of them ran without the pause) and the objects they made are frozen; collection is on
    again afterwards."""
    run(
        "import gc\n"
        "before = [s['collections'] for s in gc.get_stats()]\n"
        "import vramplan.tui.app\n"
        "after = [s['collections'] for s in gc.get_stats()]\n"
        "assert after[1:] == before[1:] and after[0] <= before[0] + 3, (before, after)  # the module's own imports\n"
        "assert gc.isenabled()\n"
        "assert gc.get_freeze_count() > 20_000, gc.get_freeze_count()\n"
    )


def test_the_vramplan_command_loads_the_app_without_garbage_collection() -> None:
    """``vramplan`` imports the GPU detection (which imports pydantic and the plan) before the app: both under the
    pause. The app's ``run`` is replaced here (no terminal): what is measured is what comes before it."""
    run(
        "import gc, os\n"
        "os.environ['VRAMPLAN_DETECT'] = '0'\n" + APP_RUN_REPLACED + "from vramplan.__main__ import run_app\n"
        "before = [s['collections'] for s in gc.get_stats()]\n"
        "assert run_app([]) == 0\n"
        "after = [s['collections'] for s in gc.get_stats()]\n"
        "assert after[1:] == before[1:] and after[0] <= before[0] + 3, (before, after)\n"
        "assert gc.isenabled() and gc.get_freeze_count() > 50_000, gc.get_freeze_count()\n"
    )


def test_the_vramplan_commands_app_freezes_what_its_start_made() -> None:
    """The app of the ``vramplan`` command, alone in its process, moves what its start made out of the collector's
    sight: full collections during the session then walk only what was made since (27-38 ms each before, a stalled
    key about every 70). An app that freezes nothing (the default: the tests run hundreds in one process) leaves its
    widgets in sight, and the frozen app releases what it froze when it ends."""
    run(
        "import asyncio, gc, os\n"
        "os.environ['VRAMPLAN_DETECT'] = '0'\n"
        "import vramplan.tui.app as tui_app\n"
        "made = []\n"
        "tui_app.VramplanApp.run = lambda self: made.append(self.freeze)\n"
        "from vramplan.__main__ import run_app\n"
        "assert run_app([]) == 0 and made == [True], made\n"
        "async def start(freeze):\n"
        "    app = tui_app.VramplanApp(freeze=freeze)\n"
        "    async with app.run_test(size=(80, 24)) as pilot:\n"
        "        await pilot.pause()\n"
        "        await app.planner.pane_widget(app.planner.pane)\n"
        "        await app.workers.wait_for_complete()  # the start-up work left for after the first frame\n"
        "        while freeze and gc.get_freeze_count() <= imported:  # frozen after the frame that follows it\n"
        "            await pilot.pause()\n"
        "        await pilot.pause()\n"
        "        return gc.get_freeze_count(), len(gc.get_objects())\n"
        "imported = gc.get_freeze_count()\n"
        "frozen, in_sight = asyncio.run(start(False))\n"
        "assert frozen <= imported and in_sight > 30_000, (imported, frozen, in_sight)  # some frozen ones freed\n"
        "frozen, left = asyncio.run(start(True))  # left in sight: what rendering keeps for a while (strips...)\n"
        "assert frozen > imported + 30_000 and left < in_sight / 2, (imported, frozen, in_sight, left)\n"
        "assert gc.get_freeze_count() == 0 and gc.isenabled()  # released at the app's end\n"
    )


def test_importing_the_app_leaves_the_collector_off_if_it_was_off() -> None:
    run("import gc\ngc.disable()\nimport vramplan.tui.app\nassert not gc.isenabled()\n")


def test_the_first_frame_imports_no_config_reader_nor_the_plan_comparison() -> None:
    """Importing a training config (DeepSpeed, axolotl...) is an action of the open prompt: its readers and PyYAML
    (some 35 ms) load when it is used; the words comparing two plans (`core.advice.plandiff`), when one is
    pinned or compared; the config.json reader (`core.plan.architecture.hf_config`), when a model comes from one; the
    plan files' reading and writing (`core.files.planio`, `planfile`, with `tomli_w` and `json`: 10M instructions), when
    a plan file is opened or written. ``json`` loads after the first frame, for the estimate's expected error in the
    headline (`core.memory.accuracy` reads its data then: 2 ms)."""
    run(
        "import sys\n"
        "from vramplan.tui.widgets import gauges\n"
        "first = []\n"
        "after_frame = gauges.MemoryGauges._after_frame\n"
        "def record(self):\n"
        "    first.append('json' in sys.modules)\n"
        "    after_frame(self)\n"
        "gauges.MemoryGauges._after_frame = record\n" + STARTED + "        await pilot.pause()\n"
        "asyncio.run(main())\n"
        "assert first[0] is False and 'json' in sys.modules, first\n"
        "importers = 'vramplan.core.files.importers.'\n"
        "loaded = [m for m in sys.modules if m.split('.')[0] == 'yaml' or m.startswith(importers)]\n"
        "assert loaded == [importers + 'config_format'], loaded\n"
        "assert 'vramplan.core.advice.plandiff' not in sys.modules\n"
        "assert 'vramplan.core.plan.architecture.hf_config' not in sys.modules\n"
        "files = ('vramplan.core.files.planio', 'vramplan.core.files.planfile', 'tomli_w')\n"
        "assert [m for m in files if m in sys.modules] == [], [m for m in files if m in sys.modules]\n"
    )


def test_the_first_frame_at_80x24_imports_only_the_model_pane_and_pressing_a_pane_key_imports_its_pane() -> None:
    """At 80x24 the first frame shows the Model pane; the other panes' modules (the strategy keys' effects and the
    checklist's widgets with them: 4-6 ms) are imported when their pane is first built."""
    run(
        "import asyncio, sys\n"
        "from vramplan.tui.app import VramplanApp\n"
        "others = [f'vramplan.tui.widgets.{m}_pane' for m in ('hardware', 'training', 'strategy', 'checklist')]\n"
        "async def main():\n"
        "    app = VramplanApp()\n"
        "    async with app.run_test(size=(80, 24)) as pilot:\n"
        "        await pilot.pause()\n"
        "        assert 'vramplan.tui.widgets.model_pane' in sys.modules\n"
        "        assert [m for m in others if m in sys.modules] == []\n"
        "        assert 'vramplan.tui.effects' not in sys.modules\n"
        "        await pilot.press('5')\n"
        "        await pilot.pause()\n"
        "        assert [m for m in others if m in sys.modules] == [others[3]]\n"
        "        assert app.planner.query_one('#pane-checklist').has_class('-current')\n"
        "asyncio.run(main())\n"
    )


class Probe(VramplanApp):
    """Notes whether the collector runs while the planner screen is made (before the first frame)."""

    collecting: bool | None = None

    def get_default_screen(self) -> Screen[None]:
        self.collecting = gc.isenabled()
        return super().get_default_screen()


async def test_no_garbage_collection_until_the_first_frame_then_it_runs_again() -> None:
    """7-8 ms of young collections fell in the first frame; they run once it is shown."""
    assert gc.isenabled()
    app = Probe()
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, gc.isenabled, "the collector on again after the first frame")
        assert app.collecting is False
    assert gc.isenabled()


async def test_an_app_that_ends_before_its_first_frame_turns_collection_back_on() -> None:
    class Quits(VramplanApp):
        def on_load(self) -> None:
            self.exit()

    async with Quits().run_test(size=(80, 24)):
        pass
    assert gc.isenabled()


def test_the_export_and_open_dialogs_import_pyyaml_only_to_write_or_read_a_yaml_file() -> None:
    """PyYAML writes the accelerate export and reads YAML training configs, nothing else: importing it took 12-17 ms
    of the export and open dialogs' first opening (`core.files.accelerate_export`, `core.files.importers.reading`)."""
    run(
        STARTED + "        for key, screen in (('ctrl+s', 'ExportScreen'), ('ctrl+o', 'OpenScreen')):\n"
        "            await pilot.press(key)\n"
        "            await pilot.pause()\n"
        "            assert type(app.screen).__name__ == screen\n"
        "            assert 'yaml' not in sys.modules, screen\n"
        "            await pilot.press('escape')\n"
        "            await pilot.pause()\n"
        "asyncio.run(main())\n"
        "from vramplan.core.files.export import render\n"
        "from vramplan.core.plan.schema.plan import default_plan\n"
        "assert 'distributed_type' in render('accelerate', default_plan()).text and 'yaml' in sys.modules\n"
    )
