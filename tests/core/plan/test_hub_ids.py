"""``--model ORG/NAME``: the local Hugging Face cache's config.json (a fake cache folder laid out as huggingface_hub
lays one out), else the preset that names the id, else one line; the cache read as hostile input; the table shared
with the importers."""

from __future__ import annotations

import json
import os
import re
import socket
from pathlib import Path
from typing import Any

import pytest

from vramplan.cli.parser import run
from vramplan.core.files.importers.apply import import_config
from vramplan.core.files.planfile import plan_toml
from vramplan.core.files.planio import load_plan, resolve_plan
from vramplan.core.memory.peak import estimate
from vramplan.core.plan.architecture.hub_cache import (
    MAX_REF_BYTES,
    cached_config,
    hub_cache_dir,
    is_repo_id,
    repo_folder,
    repo_id_of,
)
from vramplan.core.plan.catalogue import presets
from vramplan.core.plan.catalogue.hub_ids import hub_table, model_changes, preset_for_repo
from vramplan.core.plan.describe import model_name
from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.helpers.readfile import MAX_TEXT_BYTES
from vramplan.core.plan.schema.plan import default_plan

HF_CONFIGS = Path(__file__).resolve().parents[2] / "data" / "hf_configs"
COMMIT = "c1" * 20  # a 40-character commit hash
REPO = "Qwen/Qwen3-0.6B"  # a preset names it too: the cache must win


def fake_cache(root: Path, repo_id: str = REPO, config: bytes | None = None, ref: bool = True) -> Path:
    """A Hub cache as huggingface_hub writes one: the file in blobs/, the snapshot a relative symlink to it."""
    folder = root / repo_folder(repo_id)
    (folder / "blobs").mkdir(parents=True)
    (folder / "blobs" / "e7a9").write_bytes(
        config if config is not None else (HF_CONFIGS / "qwen3-0.6b.json").read_bytes()
    )
    snap = folder / "snapshots" / COMMIT
    snap.mkdir(parents=True)
    (snap / "config.json").symlink_to("../../blobs/e7a9")
    if ref:
        (folder / "refs").mkdir()
        (folder / "refs" / "main").write_text(COMMIT)
    return snap / "config.json"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "hub"
    root.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    return root


def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kw: Any) -> Any:
        raise AssertionError("a network call")

    monkeypatch.setattr(socket, "socket", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


def test_cached_snapshot_is_used_offline(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The config.json of refs/main's snapshot, read without a socket: the same model as --hf-config on the file,
    named by its repo id (the snapshot folder is a commit hash, the file a symlink into blobs/)."""
    path = fake_cache(cache)
    no_network(monkeypatch)
    with pytest.warns(UserWarning, match=r"--model Qwen/Qwen3-0\.6B: config\.json from the Hugging Face cache, "
                      r"revision c1c1c1c1c1c1 \(refs/main\)"):  # fmt: skip
        plan = resolve_plan(model=REPO)
    assert plan.model.preset is None and plan.model.hf_config == str(path)
    same = resolve_plan(hf_config=str(path))
    assert plan.model == same.model.model_copy(update={"hf_config": str(path)})
    assert estimate(plan).params_total == 596_049_920  # Qwen3-0.6B, tests/data/param_counts.json
    assert model_name(plan.model) == "Qwen/Qwen3-0.6B"


def test_cli_reads_the_cache_and_a_plan_file_keeps_it(
    cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_cache(cache)
    assert run(["estimate", "--model", REPO, "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["parameters"]["total"] == 596_049_920
    assert "from the Hugging Face cache" in err
    # exported: every model key written, hf_config as provenance; the file opens with the cache gone
    with pytest.warns(UserWarning, match="from the Hugging Face cache"):
        text = plan_toml(resolve_plan(model=REPO), plan_dir=tmp_path)
    assert "models--Qwen--Qwen3-0.6B/snapshots/" in text
    (tmp_path / "plan.toml").write_text(text)
    os.rename(cache, tmp_path / "moved")
    with pytest.warns(UserWarning):
        plan = load_plan(tmp_path / "plan.toml")
    assert estimate(plan).params_total == 596_049_920


@pytest.mark.parametrize("layout", ["HF_HOME", "XDG_CACHE_HOME", "HOME", "HUGGINGFACE_HUB_CACHE"])
def test_cache_folder_as_huggingface_hub_finds_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str) -> None:
    """huggingface_hub constants.py: HF_HUB_CACHE, the legacy HUGGINGFACE_HUB_CACHE, $HF_HOME/hub,
    $XDG_CACHE_HOME/huggingface/hub, ~/.cache/huggingface/hub."""
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    root = {
        "HF_HOME": tmp_path / "hf" / "hub",
        "XDG_CACHE_HOME": tmp_path / "xdg" / "huggingface" / "hub",
        "HOME": tmp_path / ".cache" / "huggingface" / "hub",
        "HUGGINGFACE_HUB_CACHE": tmp_path / "legacy",
    }[layout]
    value = {"HF_HOME": tmp_path / "hf", "XDG_CACHE_HOME": tmp_path / "xdg", "HOME": tmp_path}.get(layout, root)
    monkeypatch.setenv(layout, str(value))
    assert hub_cache_dir() == root
    path = fake_cache(root)
    assert model_changes(REPO).changes == {"model.hf_config": str(path)}


def test_hf_hub_cache_wins_and_empty_is_unset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "explicit"))
    assert hub_cache_dir() == tmp_path / "explicit"
    monkeypatch.setenv("HF_HUB_CACHE", "")
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    assert hub_cache_dir() == tmp_path / "home" / "hub"  # not the working directory


def test_not_cached_known_id_is_its_preset(cache: Path) -> None:
    """Not in the cache: the preset that names the id (its hub_ids), case-insensitively; a fine-tune's repo by
    its name (the importers' rule)."""
    with pytest.warns(UserWarning, match="preset llama-3.1-8b \\(named by the preset\\)"):
        plan = resolve_plan(model="meta-llama/Llama-3.1-8B-Instruct")
    assert plan.model.preset == "llama-3.1-8b"
    assert model_changes("META-LLAMA/llama-3.1-8b").changes == {"model.preset": "llama-3.1-8b"}
    found = model_changes("unsloth/Llama-3.2-1B-Instruct")
    assert found.changes == {"model.preset": "llama-3.2-1b"} and "matched by name" in found.how


def test_unknown_id_is_one_line_exit_2(cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["estimate", "--model", "nobody/no-such-model-7b"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("vramplan: --model nobody/no-such-model-7b: not in the Hugging Face cache (")
    assert "hf download nobody/no-such-model-7b config.json" in err[0] and "--hf-config PATH" in err[0]


@pytest.mark.parametrize("text", ["a/b/c", "./ckpt/llama", "org/--x", "org/name.git", "org/" + "x" * 97, "/abs"])
def test_not_an_id_is_one_line(cache: Path, text: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["estimate", "--model", text]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "neither a model preset id nor a Hugging Face id ORG/NAME" in err[0]


def test_repo_ids_and_paths() -> None:
    assert is_repo_id("meta-llama/Llama-3.1-8B") and is_repo_id("Qwen/Qwen2.5-0.5B")
    assert not any(is_repo_id(t) for t in ("llama-7b", "a/b/c", "a..b/c", "-a/b", "a/b-", "a/b c", "a/b\n"))
    assert repo_folder("google/gemma-3-12b-it") == "models--google--gemma-3-12b-it"
    assert repo_id_of(f"/x/models--google--gemma-3-12b-it/snapshots/{COMMIT}/config.json") == "google/gemma-3-12b-it"
    assert repo_id_of("/x/ckpt/config.json") is None


def test_snapshot_without_refs(cache: Path) -> None:
    """A download pinned to a commit writes no refs/main: the one snapshot holding a config.json is taken;
    several are a question (one line)."""
    path = fake_cache(cache, ref=False)
    hit = cached_config(REPO)
    assert hit is not None and (hit.path, hit.pinned_by) == (path, "the only snapshot")
    other = path.parent.parent / ("d2" * 20)
    other.mkdir()
    (other / "config.json").write_text("{}")
    with pytest.raises(PlanError, match=r"2 snapshots .* and no refs/main: give --hf-config"):
        model_changes(REPO)


def test_what_the_cache_does_not_hold_falls_back_to_the_preset(cache: Path) -> None:
    """huggingface_hub try_to_load_from_cache: refs/main naming a snapshot not downloaded, a snapshot without a
    config.json, and .no_exist/<commit>/config.json (the Hub said there is none) are all "not cached"."""
    path = fake_cache(cache)
    folder = cache / repo_folder(REPO)
    (folder / ".no_exist" / COMMIT).mkdir(parents=True)
    (folder / ".no_exist" / COMMIT / "config.json").write_text("")
    assert cached_config(REPO) is None
    os.remove(folder / ".no_exist" / COMMIT / "config.json")
    path.unlink()
    assert cached_config(REPO) is None
    (folder / "refs" / "main").write_text("f" * 40)
    assert cached_config(REPO) is None
    assert model_changes(REPO).changes == {"model.preset": "qwen3-0.6b"}


def _hostile(cache: Path, case: str) -> None:
    path = fake_cache(cache)
    ref = cache / repo_folder(REPO) / "refs" / "main"
    blob = cache / repo_folder(REPO) / "blobs" / "e7a9"
    if case == "dangling":
        blob.unlink()
    elif case == "loop":
        path.unlink()
        path.symlink_to("config.json")
    elif case == "huge":
        with open(blob, "wb") as f:
            f.truncate(MAX_TEXT_BYTES + 1)  # sparse: no disk used
    elif case == "directory":
        blob.unlink()
        blob.mkdir()
    elif case == "fifo":
        blob.unlink()
        os.mkfifo(blob)
    elif case == "not_json":
        blob.write_bytes(b"\xff\xfe{")
    elif case == "ref_huge":
        ref.write_text("a" * (MAX_REF_BYTES + 1))
    elif case == "ref_escape":
        ref.write_text("../../../../etc")
    elif case == "ref_fifo":
        ref.unlink()
        os.mkfifo(ref)
    elif case == "ref_dangling":
        ref.unlink()
        ref.symlink_to("nowhere")
    elif case == "repo_loop":
        folder = cache / repo_folder(REPO)
        os.rename(folder, cache / "elsewhere")
        folder.symlink_to(folder.name)


HOSTILE = {
    "dangling": "dangling symbolic link",
    "loop": "symbolic link loop",
    "huge": "too large",
    "directory": "no config.json in this directory",  # a folder named config.json: read as a checkpoint
    "fifo": "named pipe",
    "not_json": "not UTF-8",
    "ref_huge": "too large",
    "ref_escape": "not a revision",
    "ref_fifo": "named pipe",
    "ref_dangling": "dangling symbolic link",
    "repo_loop": "symbolic link loop",
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_cache_is_one_line_naming_the_path(cache: Path, case: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A cache entry that is there but cannot be read is said as any config.json read is (no hang on a FIFO, no
    read past the size limit, no path outside the repo's folder), exit 2; never the preset silently."""
    _hostile(cache, case)
    assert run(["estimate", "--model", REPO]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert HOSTILE[case] in err[0] and "models--Qwen--Qwen3-0.6B" in err[0], err[0]


def test_importers_share_the_table_and_the_cache(cache: Path, tmp_path: Path) -> None:
    """axolotl's base_model resolves as --model does: the cached config.json, else the preset naming the id; an
    unreadable cache entry is said and the preset used."""
    yml = tmp_path / "axolotl.yml"
    yml.write_text(f"base_model: {REPO}\nsequence_len: 1024\nmicro_batch_size: 1\n")
    assert import_config(yml, default_plan()).plan.model.preset == "qwen3-0.6b"
    path = fake_cache(cache)
    imported = import_config(yml, default_plan())
    assert imported.plan.model.hf_config == str(path)
    assert any("from the Hugging Face cache" in line for line in imported.lines())
    (cache / repo_folder(REPO) / "refs" / "main").write_text("../x")
    imported = import_config(yml, default_plan())
    assert imported.plan.model.preset == "qwen3-0.6b"
    assert any("the Hugging Face cache's copy is not used" in line for line in imported.lines())


def test_presets_name_the_ids_they_stand_for() -> None:
    """Every built-in preset names the repo its source cites; no id names two presets; each id resolves to its
    preset (the table `--model` and the importers read)."""
    reg = presets.registry()
    seen: dict[str, str] = {}
    for preset_id in reg.models:
        mp = reg.models[preset_id]
        source = re.search(r"huggingface\.co/([^/\s]+/[^/\s]+)/", mp.source)
        assert source and source.group(1) in mp.hub_ids, preset_id
        for hub_id in mp.hub_ids:
            assert hub_id.lower() not in seen, (hub_id, seen.get(hub_id.lower()), preset_id)
            seen[hub_id.lower()] = preset_id
            assert preset_for_repo(hub_id) == (preset_id, "named by the preset")
    assert hub_table() == seen


def test_a_user_preset_with_a_bad_hub_id_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "mine.toml").write_text(
        'name = "Mine"\nsource = "me"\nhub_ids = ["not an id"]\n[config]\npreset = "llama-7b"\n'
    )
    monkeypatch.setenv("VRAMPLAN_CONFIG_DIR", str(tmp_path))
    reg = presets.reload()
    assert any("hub_ids" in p and "not a Hugging Face model id" in p for p in reg.problems), reg.problems
