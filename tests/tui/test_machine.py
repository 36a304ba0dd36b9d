"""Pilot tests of "meet users where they are": detected GPUs (a fake nvidia-smi, or a slow detection that must not
hold up the first frame), a config.json loaded through the Model pane's prompt, and user presets."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from textual.widgets import Input, OptionList

from bench.data.published_configs import REAL
from tests.machine.test_nvidia_smi import H100_X8, fake_smi, n_calls, printing
from tests.tui.conftest import figure, text_of
from tests.waiting import HANG_S, until
from vramplan.core.memory.peak import estimate
from vramplan.core.plan.catalogue import presets
from vramplan.core.plan.catalogue.gpu_match import DetectedGpus
from vramplan.core.plan.schema.plan import default_plan
from vramplan.machine import nvidia_smi
from vramplan.tui.app import VramplanApp
from vramplan.tui.widgets.choice_bar import ChoiceBar
from vramplan.tui.widgets.preset_list import PresetList

H100 = DetectedGpus("NVIDIA H100 80GB HBM3", 81559, 8, "h100-80gb", True)


async def test_starts_on_the_gpus_nvidia_smi_reports(tmp_path: Path, monkeypatch) -> None:
    calls = fake_smi(tmp_path, monkeypatch, printing(H100_X8))
    app = VramplanApp()
    async with app.run_test() as pilot:
        assert app.detection is not None and app.detection.wait(HANG_S)
        # taken at once if it finished before the first frame, else by the app's next look (a 50 ms timer)
        await until(pilot, lambda: "detected: 8 x H100 80GB HBM3 (nvidia-smi)" in text_of(app, "#notice"))
        plan = app.planner.plan
        assert (plan.hardware.gpu, plan.hardware.gpus_per_node) == ("h100-80gb", 8)
        assert figure(estimate(plan).total) in text_of(app, "#headline")
        await pilot.press("2")
        await pilot.pause()
        assert "detected: 8 x H100 80GB HBM3" in text_of(app, "#gpu-details")
        assert not app.planner.history.can_undo  # the starting plan, not an edit
    assert n_calls(calls) == 1  # nvidia-smi runs once


async def test_a_slow_nvidia_smi_does_not_hold_up_the_first_frame(monkeypatch) -> None:
    release = threading.Event()

    def slow() -> DetectedGpus:
        release.wait(HANG_S)
        return H100

    slow.cache_clear = lambda: None  # type: ignore[attr-defined]  # presets.reload() clears it
    monkeypatch.setattr(nvidia_smi, "detected_gpus", slow)  # what the app's detection thread calls
    presets.reload()
    app = VramplanApp()
    async with app.run_test() as pilot:
        await pilot.pause()
        assert app.planner.plan == default_plan()  # started on the documented default, not waiting
        assert figure(estimate(default_plan()).total) in text_of(app, "#headline")
        release.set()
        assert app.detection is not None and app.detection.wait(HANG_S)
        await until(pilot, lambda: "detected: 8 x H100 80GB HBM3" in text_of(app, "#notice"), "the app's next look")
        assert app.planner.plan.hardware.gpu == "h100-80gb"  # untouched: it takes the detected GPUs
    release.clear()
    presets.reload()
    app = VramplanApp()
    async with app.run_test() as pilot:
        await pilot.press("z")  # the user is already editing when the detection arrives
        await pilot.pause()
        edited = app.planner.plan
        release.set()
        assert app.detection is not None and app.detection.wait(HANG_S)
        await until(pilot, lambda: "pick it in the Hardware pane" in text_of(app, "#notice"), "the app's next look")
        assert app.planner.plan == edited


def write_config(tmp_path: Path, name: str) -> Path:
    ckpt = tmp_path / name
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps(REAL[name][0]))
    return ckpt


async def test_a_config_json_through_the_model_pane(tmp_path: Path) -> None:
    ckpt = write_config(tmp_path, "pythia-160m")
    app = VramplanApp(plan=default_plan())
    async with app.run_test() as pilot:
        await app.planner.run_action("load_config")  # the palette's "model: load a config.json"
        await pilot.pause()
        field = app.planner.query_one("#f-model-hf_config Input", Input)
        assert app.planner.focused is field
        await pilot.press(*"nope", "enter")
        await pilot.pause()
        assert "no such file or directory" in text_of(app, "#f-model-hf_config .field-error")
        assert app.planner.plan == default_plan() and field.value == "nope"
        field.value = str(ckpt)  # a checkpoint directory holding a config.json
        await pilot.press("enter")
        await pilot.pause()
        plan = app.planner.plan
        assert plan.model.hf_config == str(ckpt) and plan.model.model_type == "gpt_neox"
        assert estimate(plan).params_total == REAL["pythia-160m"][1]
        assert figure(estimate(plan).total) in text_of(app, "#headline")
        assert text_of(app, "#model-details").startswith("pythia-160m  gpt_neox")  # the name from the config
        assert not app.planner.query_one("#f-model-hf_config").has_class("-error")

        # gpt_neox's structure keys are shown, with what is in effect; the others are not
        def visible(key: str) -> bool:
            return app.planner.query_one(f"#f-model-{key}").display

        assert all(visible(k) for k in ("use_parallel_residual", "partial_rotary_factor", "hidden_act"))
        assert not any(visible(k) for k in ("mlp_bias", "alibi", "head_dim", "new_decoder_architecture"))
        rotary = app.planner.query_one("#f-model-partial_rotary_factor Input", Input)
        assert rotary.value == "0.25"  # rotary_pct in the file
        bar = app.planner.query_one("#f-model-use_parallel_residual ChoiceBar", ChoiceBar)
        assert bar.index == 1  # "yes": GPT-NeoX runs attention and MLP in parallel
        app.planner.set_focus(bar)
        await pilot.press("left")
        await pilot.pause()
        plan = app.planner.plan
        assert plan.model.use_parallel_residual is False
        assert figure(estimate(plan).total) in text_of(app, "#headline")
        changed = "changed from the config.json: use_parallel_residual"
        await until(pilot, lambda: changed in text_of(app, "#model-details"), "the pane's sync")
        rotary.value = "50%"  # a structure number takes what every number field takes
        await pilot.pause()
        assert app.planner.plan.model.partial_rotary_factor == 0.5
        rotary.value = ""  # empty: unset here, so the config.json's rotary_pct is in effect again
        await pilot.pause()
        assert app.planner.plan.model.partial_rotary_factor == 0.25


async def test_user_presets_are_listed_and_marked_and_a_broken_one_is_reported(tmp_path: Path, monkeypatch) -> None:
    root = Path(__file__).resolve().parents[2] / "presets"
    config = tmp_path / "config"
    (config / "models").mkdir(parents=True)
    (config / "hardware").mkdir()
    model = (root / "models" / "llama-7b.toml").read_text().replace('id = "llama-7b"\n', "")
    (config / "models" / "our-llama.toml").write_text(model.replace('name = "LLaMA-7B"', 'name = "Our-LLaMA"'))
    gpu = (root / "hardware" / "a100-80gb.toml").read_text().replace('id = "a100-80gb"\n', "")
    (config / "hardware" / "lab-gpu.toml").write_text(gpu.replace('name = "NVIDIA A100 80GB SXM4"', 'name = "Lab GPU"'))
    broken = config / "models" / "broken.toml"
    broken.write_text('name = "Broken"\nsource = "x"\n[config]\nmodel_type = "llama"\nhidden_size = 0\n')
    monkeypatch.setenv("VRAMPLAN_CONFIG_DIR", str(config))
    presets.reload()
    app = VramplanApp(plan=default_plan())
    async with app.run_test() as pilot:
        await pilot.pause()
        assert f"✘ skipped user preset: {broken}" in text_of(app, "#notice")
        models = app.planner.query_one("#model-list", PresetList)
        rows = {o.id: str(o.prompt) for o in models.options if o.id}
        assert rows["our-llama"].endswith("(user)") and not rows["llama-7b"].endswith("(user)")
        (note,) = [o for o in models.options if o.disabled]
        problem = presets.registry().broken["models/broken"]  # "PATH: config.vocab_size: missing"
        assert problem.startswith(str(broken)) and problem in str(note.prompt)
        await pilot.press("slash", *"our", "enter")
        await pilot.pause()
        assert app.planner.plan.model.preset == "our-llama"
        assert f"user preset: {config / 'models' / 'our-llama.toml'}" in text_of(app, "#model-details")
        await pilot.press("2")
        await pilot.pause()
        gpus = {o.id: str(o.prompt) for o in app.planner.query_one("#gpu-list", OptionList).options}
        assert gpus["lab-gpu"].endswith("(user)") and not gpus["a100-80gb"].endswith("(user)")
