"""Issue 15, items 1-3: an export never destroys or creates a file where it should not (non-regular targets,
symlinks, signals during the write, long names, odd paths)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import user_dir
from tests.hostile import TRAINING_CONFIGS, write_training_configs
from tests.waiting import HANG_S
from vramplan.core.files import safewrite
from vramplan.core.files.importers.apply import import_config
from vramplan.core.files.planfile import plan_toml
from vramplan.core.files.planio import plan_file_from_data
from vramplan.core.files.safewrite import OverwriteRefused, WriteError, check_target, write_atomic
from vramplan.core.memory.peak import estimate
from vramplan.core.plan.catalogue import presets
from vramplan.core.plan.catalogue.gpu_match import detected_from
from vramplan.core.plan.detected import plan_on
from vramplan.core.plan.helpers import tomlio
from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.schema.plan import Plan, default_plan
from vramplan.core.time.step import step_time

ORIGINAL = b"[model]\npreset = 'llama-7b'\n"


def test_non_regular_targets_are_never_replaced_even_with_overwrite(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.toml"
    os.mkfifo(fifo)
    sock_path = tmp_path / "sock.toml"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    try:
        for target, kind in ((fifo, "named pipe"), (sock_path, "socket")):
            for overwrite in (False, True):
                with pytest.raises(WriteError, match=rf"{kind}.*never replaced") as info:
                    write_atomic(target, "x", overwrite=overwrite)
                assert not isinstance(info.value, OverwriteRefused)  # no "use --force": forcing cannot help
    finally:
        sock.close()
    assert fifo.is_fifo() and sock_path.is_socket()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe.toml", "sock.toml"]


def test_devices_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    """``/dev/null`` (``export -o /dev/null --force`` as root replaced it): checked with `check_target`, which
    writes nothing, so a regression here can never destroy the machine's /dev/null."""
    link = tmp_path / "out.toml"
    link.symlink_to("/dev/null")
    for target in (Path("/dev/null"), link):
        for overwrite in (False, True):
            with pytest.raises(WriteError, match=r"device.*never replaced"):
                check_target(target, overwrite)
    assert Path("/dev/null").is_char_device() and link.is_symlink()


def test_a_dangling_link_creates_nothing(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = tmp_path / "plan.toml"
    link.symlink_to(elsewhere / "victim.toml")
    for overwrite in (False, True):
        with pytest.raises(WriteError, match="dangling symbolic link"):
            write_atomic(link, "x", overwrite=overwrite)
    assert list(elsewhere.iterdir()) == [] and link.is_symlink()


@pytest.mark.parametrize("mode", [0o1777, 0o777])
def test_links_in_world_writable_directories_are_refused(tmp_path: Path, mode: int) -> None:
    """A link planted in /tmp (mode 1777) could point at any of the victim's files: never written through; nor in
    a world-writable folder without the sticky bit (issue 39: it was written through with --force)."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(mode)
    victim = tmp_path / "victim.toml"
    victim.write_bytes(ORIGINAL)
    link = shared / "plan.toml"
    link.symlink_to(victim)
    with pytest.raises(WriteError, match=r"shared directory \(world-writable\): not written through"):
        write_atomic(link, "x", overwrite=True)
    assert victim.read_bytes() == ORIGINAL


def test_links_to_another_users_file_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    victim = tmp_path / "victim.toml"
    victim.write_bytes(ORIGINAL)
    link = tmp_path / "plan.toml"
    link.symlink_to(victim)
    monkeypatch.setattr(os, "geteuid", lambda: victim.stat().st_uid + 1)  # as if another user ran vramplan
    with pytest.raises(WriteError, match="another user"):
        write_atomic(link, "x", overwrite=True)
    assert victim.read_bytes() == ORIGINAL


def test_a_link_to_the_users_own_file_is_written_through(tmp_path: Path) -> None:
    real = tmp_path / "real.toml"
    real.write_bytes(ORIGINAL)
    link = tmp_path / "link.toml"
    link.symlink_to(real)
    write_atomic(link, "new", overwrite=True)
    assert real.read_text() == "new" and link.is_symlink()


@pytest.mark.parametrize("length", [242, 250, 255])
def test_long_legal_names_can_be_written(tmp_path: Path, length: int) -> None:
    target = tmp_path / ("p" * (length - 5) + ".toml")
    write_atomic(target, "x")
    assert target.read_text() == "x"
    assert [p.name for p in tmp_path.iterdir()] == [target.name]


def test_odd_paths_are_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(WriteError, match="empty path"):
        check_target("")
    with pytest.raises(WriteError, match="ends with /"):
        write_atomic("newdir/", "x")
    (tmp_path / "dir").mkdir()
    with pytest.raises(WriteError, match="is a directory"):
        write_atomic("dir/", "x", overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir"]


WRITER = textwrap.dedent(
    """
    import os, sys, time
    from vramplan.core.files import safewrite
    real_fsync = os.fsync
    def slow_fsync(fd):
        real_fsync(fd)
        if os.path.isfile(os.readlink(f"/proc/self/fd/{fd}")):
            print("writing", flush=True)
            time.sleep(3600)  # the write never ends by itself: only the signal ends the process
    safewrite.os.fsync = slow_fsync
    safewrite.write_atomic(sys.argv[1], "x" * 1000, overwrite=True)
    """
)


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="needs /proc")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_or_sighup_during_the_write_leaves_no_temporary_file(tmp_path: Path, signum: int) -> None:
    target = tmp_path / "plan.toml"
    target.write_bytes(ORIGINAL)
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(target)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline() == "writing\n"
    assert len(list(tmp_path.iterdir())) == 2  # the temporary file is there, beside the target
    proc.send_signal(signum)
    try:
        proc.wait(timeout=HANG_S)  # its end is the event: without the signal's handling it sleeps an hour
    finally:
        proc.kill()  # a no-op once it has ended
    assert proc.returncode == -signum  # the signal still ends the process, as it would have
    assert [p.name for p in tmp_path.iterdir()] == ["plan.toml"]
    assert target.read_bytes() == ORIGINAL


def test_a_fifo_made_during_the_write_is_not_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check before writing and the final rename are separate steps: the rename checks again."""
    target = tmp_path / "plan.toml"
    real_fsync = os.fsync

    def fsync_then_fifo(fd: int) -> None:
        real_fsync(fd)
        if not target.exists():
            os.mkfifo(target)  # another program puts a FIFO there while ours is being written

    monkeypatch.setattr(safewrite.os, "fsync", fsync_then_fifo)
    with pytest.raises(WriteError, match="named pipe"):
        write_atomic(target, "ours", overwrite=True)
    assert target.is_fifo() and [p.name for p in tmp_path.iterdir()] == ["plan.toml"]


@pytest.mark.parametrize("name", sorted(TRAINING_CONFIGS))
def test_a_training_config_with_an_unconvertible_number_is_one_line(tmp_path: Path, name: str) -> None:
    """Issue 39: a DeepSpeed JSON or a YAML config with an integer of more than 4,300 digits raised Python's
    ValueError (a traceback in every command, a crash of the app's ctrl+o); NaN is not JSON."""
    path = write_training_configs(tmp_path)[name]
    with pytest.raises(PlanError) as info:
        import_config(path, default_plan())
    line = info.value.line()
    assert name in line and "\n" not in line and "set_int_max_str_digits" not in line, line
    assert ("4,300 digits" in line) or ("NaN is not a JSON number" in line), line


def test_text_that_is_not_utf8_is_one_line_and_writes_nothing(tmp_path: Path) -> None:
    """Issue 39: a lone surrogate (a non-UTF-8 byte in a command-line argument, as Python decodes it) in an export's
    text was a UnicodeEncodeError traceback; the CLI refuses such a --title/--note before writing (test_hostile_cli),
    and the writer itself refuses to write it."""
    with pytest.raises(WriteError, match=r"not UTF-8 .* nothing written") as info:
        write_atomic(tmp_path / "plan.toml", 'title = "caf\udce9"\n')
    assert "\n" not in info.value.line() and "\udce9" not in info.value.line()
    assert list(tmp_path.iterdir()) == []


# -- round trips (issue 39.4): a plan file records what a colleague needs to load it ----------------------------


def _same_estimate(a: Plan, b: Plan) -> None:
    assert a == b
    assert estimate(a).total == estimate(b).total and step_time(a).step_seconds == step_time(b).step_seconds


def test_a_plan_on_an_unknown_detected_gpu_loads_where_that_gpu_is_missing() -> None:
    """nvidia-smi reported a GPU no preset knows: the plan names the runtime preset ``detected-...``, which a plan
    file used to leave out, so it failed to load (even on the same machine: a plan file never runs nvidia-smi)."""
    det = detected_from("NVIDIA Foo 9000, 40000\n")
    assert det is not None and not det.matched
    plan = plan_on(det)
    text = plan_toml(plan)
    assert f"[presets.hardware.{det.gpu_id}]" in text
    presets.reload()  # another machine, or this one without detection
    assert det.gpu_id not in presets.registry().gpus
    pf = plan_file_from_data(tomlio.loads(text), "plan.toml")
    _same_estimate(pf.plan, plan)
    assert pf.notices == ()  # the stored [estimate] agrees


def test_a_plan_on_a_user_model_preset_loads_for_a_colleague(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mine = 'name = "LLaMA-7B, 30 layers"\nsource = "mine"\n[config]\npreset = "llama-7b"\nnum_hidden_layers = 30\n'
    user_dir(tmp_path, monkeypatch, {"models/mine.toml": mine})
    plan = default_plan().with_changes({"model.preset": "mine"})
    text = plan_toml(plan)
    monkeypatch.setenv("VRAMPLAN_CONFIG_DIR", str(tmp_path / "colleague"))
    presets.reload()
    pf = plan_file_from_data(tomlio.loads(text), "plan.toml")
    _same_estimate(pf.plan, plan)
    assert pf.notices == () and presets.model_preset("mine").name == "LLaMA-7B, 30 layers"
    assert "plan.toml (carried by the plan file)" in presets.registry().origin["models/mine"]


def test_a_carried_preset_never_replaces_one_known_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The colleague's own preset of that id is used (the stored [estimate] then says what changed); a built-in is
    never carried, and a carried table that does not validate names its key."""
    user_dir(tmp_path, monkeypatch, {"models/mine.toml": 'name = "A"\nsource = "x"\n[config]\npreset = "llama-7b"\n'})
    plan = default_plan().with_changes({"model.preset": "mine"})
    text = plan_toml(plan)
    assert "[presets.hardware" not in text  # a100-80gb is built in
    other = 'name = "B"\nsource = "y"\n[config]\npreset = "llama-7b"\nnum_hidden_layers = 2\n'
    user_dir(tmp_path / "other", monkeypatch, {"models/mine.toml": other})
    pf = plan_file_from_data(tomlio.loads(text), "plan.toml")
    assert presets.model_preset("mine").name == "B" and pf.plan.model.num_hidden_layers == 32  # the file's keys
    bad = text.replace('[presets.models.mine]\nname = "A"', "[presets.models.new]\nname = 7")
    with pytest.raises(PlanError, match=r"presets\.models\.new\.name: must be a string"):
        plan_file_from_data(tomlio.loads(bad), "plan.toml")


def test_standard_output_and_kernel_files_are_said_so(tmp_path: Path) -> None:
    """``-o /dev/stdout`` into a pipe said "/proc/<pid>/fd/pipe:[...]: No such file or directory"; ``-o
    /proc/self/mem`` said "already exists (use --force)", then with --force "directory does not exist"."""
    cmd = [sys.executable, "-m", "vramplan", "export", "-o", "/dev/stdout", "--force"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=HANG_S)  # stdout: a pipe
    assert r.returncode == 2 and r.stdout == "", r.stderr
    assert r.stderr == (
        "vramplan: /dev/stdout: is a named pipe (FIFO), not a file: never replaced (standard output: -o - prints to "
        "it)\n"
    )
    if Path("/proc/self/mem").exists():
        for overwrite in (False, True):
            with pytest.raises(WriteError, match="a file system of the kernel's"):
                check_target("/proc/self/mem", overwrite=overwrite)


# -- importers (issue 39.6): every value read or said, none taken silently -------------------------------------


def _import_lines(tmp_path: Path, name: str, text: str) -> tuple[Plan, list[str]]:
    path = tmp_path / name
    path.write_text(text)
    imported = import_config(path, default_plan())
    return imported.plan, imported.lines()


def test_accelerate_names_absent_keys_as_absent_and_says_an_unknown_strategy(tmp_path: Path) -> None:
    plan, lines = _import_lines(
        tmp_path,
        "acc.yaml",
        "distributed_type: FSDP\nnum_processes: 8\nfsdp_config:\n  fsdp_sharding_strategy: MAYBE\n",
    )
    assert plan.strategy.zero_stage == 3
    assert any('ignored fsdp_config.fsdp_sharding_strategy="MAYBE": not a sharding strategy' in x for x in lines), lines
    _, lines = _import_lines(
        tmp_path, "one.yaml", "num_processes: 1\nfsdp_config:\n  fsdp_sharding_strategy: FULL_SHARD\n"
    )
    assert any('(no distributed_type)="NO" -> strategy.zero_stage=0' in x for x in lines), lines
    assert not any(x.count("distributed_type=") and "(no " not in x for x in lines), lines
    plan, lines = _import_lines(
        tmp_path, "ds.yaml", "distributed_type: DEEPSPEED\nnum_processes: 8\ndeepspeed_config: {}\n"
    )
    assert plan.strategy.zero_stage == 2  # DeepSpeedPlugin's default (it was read as 0, under the key's own name)
    assert any("(no deepspeed_config.zero_stage) -> strategy.zero_stage=2" in x for x in lines), lines


def test_axolotl_gradient_checkpointing_maybe_is_ignored_not_full(tmp_path: Path) -> None:
    plan, lines = _import_lines(tmp_path, "ax.yaml", "base_model: x\ngradient_checkpointing: maybe\n")
    assert any('ignored gradient_checkpointing="maybe": not a value axolotl takes' in x for x in lines), lines
    assert plan.strategy.gradient_checkpointing == default_plan().strategy.gradient_checkpointing
    plan, _ = _import_lines(tmp_path, "ax2.yaml", "base_model: x\ngradient_checkpointing: offload\n")
    assert plan.strategy.gradient_checkpointing == "full"


def test_a_calibration_is_never_written_that_would_not_read_back(tmp_path: Path) -> None:
    """Issue 39.6 refuses an allocator gap past the allocated peak when a calibration is read (it showed as "100%");
    `vramplan measure --save-calibration` of a small plan can measure one (reserved over twice allocated): such a
    file is not written, rather than written and refused later."""
    from vramplan.core.files.calibration import Calibration, read_calibration, write_calibration

    path = tmp_path / "cal.toml"
    small = Calibration(cuda_context_bytes=500 << 20, allocator_gap_bytes=90 << 20, allocated_peak_bytes=60 << 20)
    with pytest.raises(PlanError) as info:
        write_calibration(path, small)
    assert info.value.line() == (
        f"{path}: not a calibration vramplan can read back (terms.allocator_gap_bytes: more than "
        "allocated_peak_bytes (94,371,840 > 62,914,560): the gap applies as overhead.allocator_reserve_percent, at "
        "most 100% of the peak); nothing written"
    )
    assert list(tmp_path.iterdir()) == []
    fine = Calibration(cuda_context_bytes=500 << 20, allocator_gap_bytes=60 << 20, allocated_peak_bytes=60 << 20)
    assert read_calibration(write_calibration(path, fine)).allocator_reserve_percent == 100.0
