"""Issue 15 through the real CLI: hostile input is one line on stderr and exit code 2, never a traceback or a
hang; exports destroy nothing; a closed stdout is no crash."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import tomli_w

from tests.hostile import (
    DOTTED_KEY_FILES,
    strict_json,
    write_config_files,
    write_plan_files,
    write_training_configs,
)
from tests.waiting import HANG_S
from vramplan.__main__ import mistyped_command
from vramplan.cli.parser import run

ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str, cwd: Path = ROOT, **kw: object) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "vramplan", *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=HANG_S, **kw)  # type: ignore[call-overload]


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err and len(lines[0]) < 400, err
    return lines[0]


def test_every_broken_plan_file_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = write_plan_files(tmp_path)
    fifo = files.pop("fifo.toml")
    for name, path in files.items():
        for command in ("estimate", "check", "fit", "export"):
            code = run([command, str(path), *(["-o", "-"] if command == "export" else [])])
            captured = capsys.readouterr()
            assert code == 2, (name, command, captured)
            assert name in one_error_line(captured.err)
            assert captured.out == ""
    r = cli("estimate", str(fifo))  # in a subprocess: a hang is a timeout, not a stuck suite
    assert r.returncode == 2 and "named pipe" in one_error_line(r.stderr)


def test_every_broken_config_json_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name, path in write_config_files(tmp_path).items():
        assert run(["estimate", "--hf-config", str(path)]) == 2, name
        line = one_error_line(capsys.readouterr().err)
        assert name in line and "no config.json in this directory" not in line


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["fit", "--limit", "-5"], "--limit: expected a whole number of at least 1, got '-5'"),
        (["fit", "--limit", "0"], "--limit: expected a whole number of at least 1"),
        (["estimate", "--model", ""], "--model: must not be empty"),
        (["check", "--gpu", ""], "--gpu: must not be empty"),
        (["estimate", "--hf-config", ""], "--hf-config: must not be empty"),
        (["estimate", "--set", "training.micro_batch_size=true"], "training.micro_batch_size: must be a number"),
        (["estimate", "--set", "hardware.price_per_gpu_hour=inf"], "must be a finite number"),
        (["estimate", "--set", "training.learning_rate=inf"], "must be a finite number"),
        (["estimate", "--set", "training.grad_clip=nan"], "must be a finite number"),
        (["estimate", "--set", "training.mfu=5e-324"], "training.mfu: must be greater than or equal to 0.001"),
        (["estimate", "--set", f"training.tokens={'9' * 5000}"], "training.tokens"),
        (["estimate", "--set", f"model.hidden_size={'9' * 301}"], "model.hidden_size"),
        (["estimate", "--set", "model.preset=" + "x" * 20_000], "characters)"),
        (["export", "-o", ""], "-o: empty path"),
        (["estimate", "--set", "training.lora_targets=[1, 2, 3]"], "must be a string (got 1) (and 2 more items)"),
        (["estimate", "--set", "checklist.ticked=nan.data,oops"], "not a by-hand checklist item: 'oops'"),
        (["estimate", "--set", "strategy.compile=yes"], "strategy.compile: must be true or false (got 'yes')"),
        (["measure", "--steps", "0"], "--steps: expected a whole number from 1 to 99,999,999, got '0'"),
        (["measure", "--steps", "-1"], "--steps: expected a whole number from 1 to 99,999,999, got '-1'"),
        (["measure", "--warmup", "-1"], "--warmup: expected a whole number from 0 to 99,999,999, got '-1'"),
    ],
)
def test_bad_values_are_one_short_line(args: list[str], expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(args) == 2
    captured = capsys.readouterr()
    line = one_error_line(captured.err)
    assert expected in line and len(line) < 250, line
    assert "sys.set_int_max_str_digits" not in line and "instance of" not in line
    assert captured.out == ""


def test_fit_limit_one_is_taken(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["fit", "--limit", "1", "--json"]) == 0
    assert len(strict_json(capsys.readouterr().out)["suggestions"]) <= 1


def test_export_refuses_fifos_and_dangling_links(tmp_path: Path) -> None:
    """(``/dev/null`` itself is tested through `check_target` in tests/core/files/test_hostile_files.py: a regression
    run as root must not be able to replace the machine's /dev/null.)"""
    fifo = tmp_path / "pipe.toml"
    os.mkfifo(fifo)
    dangling = tmp_path / "link.toml"
    dangling.symlink_to(tmp_path / "nowhere.toml")
    for target, expected in ((fifo, "named pipe"), (dangling, "dangling")):
        r = cli("export", "-o", str(target), "--force")
        assert r.returncode == 2 and expected in one_error_line(r.stderr), r.stderr
    r = cli("export", "-o", "newdir/", cwd=tmp_path)
    assert r.returncode == 2 and "ends with /" in one_error_line(r.stderr)
    assert fifo.is_fifo() and dangling.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.toml", "pipe.toml"]


def test_closed_stdout_is_one_line_not_a_traceback() -> None:
    r = cli("estimate", stdout=None, pass_fds=(), preexec_fn=lambda: os.close(1))
    assert r.returncode == 2 and "standard output is closed" in one_error_line(r.stderr)


def test_a_reader_that_stops_early_is_no_error() -> None:
    cmd = f"{sys.executable} -m vramplan keys | head -c 1 >/dev/null; exit ${{PIPESTATUS[0]}}"
    r = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, cwd=ROOT, timeout=HANG_S)
    assert r.returncode == 0 and r.stderr == ""


def test_a_broken_user_gpu_file_shadowing_a_builtin_is_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from vramplan.core.plan.catalogue import presets

    (tmp_path / "hardware").mkdir()
    (tmp_path / "hardware" / "a100-80gb.toml").write_text("name = 'mine'\nmemory_mib = 'lots'\n")
    monkeypatch.setenv("VRAMPLAN_CONFIG_DIR", str(tmp_path))
    presets.reload()
    for command in ("estimate", "check", "fit"):
        code = run([command, "--json"])
        captured = capsys.readouterr()
        assert code in (0, 1)
        strict_json(captured.out)
        assert "a100-80gb.toml" in captured.err and "the built-in a100-80gb is used" in captured.err, command


def test_escape_sequences_in_a_config_name_never_reach_the_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.json"
    config.write_text(
        '{"model_type": "llama", "_name_or_path": "\\u001b]0;pwned\\u0007\\u001b[31mred", "vocab_size": 64,'
        ' "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2}'
    )
    assert run(["estimate", "--hf-config", str(config)]) == 0
    captured = capsys.readouterr()
    assert "\x1b" not in captured.out + captured.err and "\x07" not in captured.out + captured.err
    assert "red" in captured.out


def test_a_mistyped_command_is_one_line_not_the_planner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`vramplan estmate` (a bare word that names no file, close to a command's name) opened the planner on the
    default plan with "no such file": it is one line naming the command meant, and exit code 2."""
    for word, meant in (("estmate", "estimate"), ("Presets", "presets"), ("gpu", "gpus"), ("hepl", "help")):
        r = cli(word, cwd=tmp_path)
        assert r.returncode == 2 and r.stdout == "", (word, r)
        line = one_error_line(r.stderr)
        assert f"'{word}'" in line and f"did you mean {meant}?" in line, line
    # a bare word far from every command is no command either (issue 39: `vramplan bogus` opened the planner)
    for word in ("bogus", "test", "myplan"):
        r = cli(word, cwd=tmp_path)
        assert r.returncode == 2 and r.stdout == "", (word, r)
        assert (
            one_error_line(r.stderr)
            == f"vramplan: no command or plan file '{word}' (vramplan --help lists the commands)"
        )
    # what is a plan file to open: an existing file of that name, a path, a name with an extension (the planner
    # opens and says when no such file exists); no suggestion for a word far from every command
    monkeypatch.chdir(tmp_path)
    (tmp_path / "estmate").write_text("")
    for arg in ("estmate", "plans/estimate", "estmate.toml", "test", "myplan", "fix"):
        assert mistyped_command(arg) == "", arg


def test_a_long_dotted_key_is_one_line_in_every_command_that_reads_toml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 39: a plan file of one dotted key of 100,000 parts (200 KB) took 8-45 s to be refused (estimate, check,
    fit and export are in the test of every broken plan file above); bench/bench_hostile.py times each command."""
    from vramplan.core.plan.catalogue import presets

    dotted = tmp_path / "dotted_table.toml"
    dotted.write_text(DOTTED_KEY_FILES["dotted_table.toml"])
    good = tmp_path / "good.toml"
    good.write_text('[model]\npreset = "llama-7b"\n')
    for argv in (
        ["gpus", str(dotted)],
        ["diff", str(good), str(dotted)],
        ["diff", str(dotted), str(good)],
        ["estimate", "--calibration", str(dotted)],
        ["measure", str(dotted), "--device", "cpu"],
    ):
        assert run(argv) == 2, argv
        captured = capsys.readouterr()
        line = one_error_line(captured.err)
        assert "dotted_table.toml" in line and "a dotted key of more than 16 parts" in line, (argv, line)
        assert captured.out == ""
    (tmp_path / "cfg" / "models").mkdir(parents=True)
    (tmp_path / "cfg" / "models" / "dotted.toml").write_text(DOTTED_KEY_FILES["dotted_table.toml"])
    monkeypatch.setenv("VRAMPLAN_CONFIG_DIR", str(tmp_path / "cfg"))
    presets.reload()
    for command in ("presets", "estimate"):
        assert run([command]) in (0, 1)
        err = capsys.readouterr().err
        assert "skipped user preset:" in err and "dotted.toml: a dotted key of more than 16 parts" in err, err


def test_training_configs_with_unconvertible_numbers_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 39: ``--from`` a DeepSpeed JSON with a 5,000-digit integer was a ValueError traceback, and ``measure
    --from`` exited 1, which measure documents as "out of memory"."""
    for name, path in write_training_configs(tmp_path).items():
        for argv in (["estimate", "--from", str(path)], ["measure", "--from", str(path), "--device", "cpu"]):
            assert run(argv) == 2, (name, argv)
            captured = capsys.readouterr()
            assert name in one_error_line(captured.err) and captured.out == ""


# -- Ctrl-C (issue 39): one line, exit 130, nothing printed or written ----------------------------------------

INTERRUPTIBLE = {  # a command, and the function of its work a Ctrl-C is made to land in
    "estimate": ("vramplan.core.time.step", "step_time"),
    "check": ("vramplan.core.advice.checklist", "checklist"),
    "fit": ("vramplan.core.advice.advisor", "advise"),
    "gpus": ("vramplan.core.advice.gpuguide", "gpu_guide"),
    "export": ("vramplan.core.files.safewrite", "_write_all"),  # mid-write: the temporary file is there
}


@pytest.mark.parametrize("command", sorted(INTERRUPTIBLE))
def test_ctrl_c_in_any_command_is_one_line_and_exit_130(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Ctrl-C during fit, gpus, check, export or a slow estimate was a 35-53 line KeyboardInterrupt traceback; the
    one handler (`vramplan.__main__.main`) says "interrupted", drops what the command had printed and exits 130."""
    import importlib

    from vramplan.__main__ import main

    module, name = INTERRUPTIBLE[command]

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(importlib.import_module(module), name, interrupted)
    monkeypatch.chdir(tmp_path)
    argv = [command, "--model", "llama-3.1-8b", *(["-o", "plan.toml"] if command == "export" else [])]
    assert main(argv) == 130
    captured = capsys.readouterr()
    assert captured.err == "vramplan: interrupted\n" and captured.out == ""
    assert list(tmp_path.iterdir()) == []  # no plan.toml, no temporary file


def test_a_ctrl_c_that_an_import_wrapped_is_one_line_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Ctrl-C inside a class body's ``__set_name__`` (``import platform`` while ``gpus`` loads, 0.15 s in) reaches
    vramplan as "RuntimeError: Error calling __set_name__" caused by the KeyboardInterrupt (CPython 3.11): it was a
    traceback and exit 1, and is now the same one line and 130."""
    import vramplan.core.advice.gpuguide as guide
    from vramplan.__main__ import main

    def wrapped(*args: object, **kwargs: object) -> None:
        print("half a table")
        raise RuntimeError("Error calling __set_name__ on 'cached_property' instance") from KeyboardInterrupt()

    monkeypatch.setattr(guide, "gpu_guide", wrapped)
    monkeypatch.chdir(tmp_path)
    assert main(["gpus", "--model", "llama-3.1-8b"]) == 130
    captured = capsys.readouterr()
    assert captured.err == "vramplan: interrupted\n" and captured.out == ""

    def other(*args: object, **kwargs: object) -> None:  # an error raised while handling one is not an interrupt
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise RuntimeError("a bug") from None

    monkeypatch.setattr(guide, "gpu_guide", other)
    with pytest.raises(RuntimeError, match="a bug"):
        main(["gpus", "--model", "llama-3.1-8b"])


SIGINT_IN = """
import os, signal, sys, time
import {module} as target
def interrupted(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(1)
target.{name} = interrupted
sys.argv = ["vramplan", *sys.argv[1:]]
from vramplan.__main__ import main
sys.exit(main())
"""


@pytest.mark.parametrize(
    ("argv", "module", "name"),
    [
        (["fit", "--model", "llama-3.1-70b"], "vramplan.core.advice.advisor", "advise"),
        (["export", "-o", "plan.toml"], "vramplan.core.files.safewrite", "_write_all"),
        (
            ["measure", "--model", "llama-3.2-1b", "--gpus", "1", "--device", "cpu"],
            "vramplan.cli.measuring",
            "_need_extra",
        ),
    ],
)
def test_a_real_sigint_is_one_line_and_exit_130(tmp_path: Path, argv: list[str], module: str, name: str) -> None:
    """The signal itself, in a process of its own: during the fit advisor, mid-write of an export (nothing is left
    in the folder), and in `measure`'s first seconds (its imports: was a traceback or exit 1)."""
    import signal

    assert signal.getsignal(signal.SIGINT) is not signal.SIG_IGN  # else the child inherits SIGINT ignored
    code = SIGINT_IN.format(module=module, name=name)
    cmd = [sys.executable, "-c", code, *argv]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=HANG_S)
    assert (r.returncode, r.stderr, r.stdout) == (130, "vramplan: interrupted\n", ""), r
    assert list(tmp_path.iterdir()) == []


# -- text that is not UTF-8, text that would drive the terminal (issue 39) ---------------------------------------


def test_a_title_or_note_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    """Bytes of another encoding in ``--title``/``--note`` were a UnicodeEncodeError traceback from the atomic
    write; they are refused before anything is written."""
    for option in ("--title", "--note"):
        for target in ("plan.toml", "plan.md", "-"):
            cmd = [sys.executable, "-m", "vramplan", "export", "-o", target, option.encode(), b"caf\xe9"]
            r = subprocess.run(cmd, capture_output=True, cwd=tmp_path, timeout=HANG_S)
            err = r.stderr.decode()
            assert r.returncode == 2 and r.stdout == b"", (option, target, err)
            assert f"{option}: not UTF-8 text (byte 0xe9 at 4)" in one_error_line(err)
    assert list(tmp_path.iterdir()) == []


ESCAPES = "\x1b]0;pwned\x07\x1b[2J\x9b31m\u202e"  # set the title, clear the screen, a C1 CSI, a bidi override


def test_escape_sequences_in_user_presets_never_reach_the_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A user preset's name was printed raw by presets, estimate, check, fit and gpus (it set the terminal's title and
    cleared the screen)."""
    from vramplan.core.plan.catalogue import presets

    gpu = presets.gpu("a100-80gb").model_dump(exclude={"id"}, exclude_none=True)
    cfg = tmp_path / "cfg"
    (cfg / "models").mkdir(parents=True)
    (cfg / "hardware").mkdir()
    model = {"name": f"Evil{ESCAPES} model", "source": f"me{ESCAPES}", "config": {"preset": "llama-7b"}}
    (cfg / "models" / "evil.toml").write_text(tomli_w.dumps(model))
    (cfg / "hardware" / "evilgpu.toml").write_text(tomli_w.dumps({**gpu, "name": f"Evil{ESCAPES} GPU"}))
    monkeypatch.setenv("VRAMPLAN_CONFIG_DIR", str(cfg))
    presets.reload()
    for argv in (
        ["presets"],
        ["estimate", "--model", "evil", "--gpu", "evilgpu"],
        ["check", "--model", "evil", "--gpu", "evilgpu"],
        ["fit", "--model", "evil", "--gpu", "evilgpu", "--limit", "2"],
        ["gpus", "--model", "evil"],
        ["export", "--model", "evil", "--gpu", "evilgpu", "--format", "markdown", "-o", "-"],
    ):
        run(argv)
        captured = capsys.readouterr()
        shown = captured.out + captured.err
        assert not any(ch in shown for ch in "\x1b\x07\x9b\u202e"), (argv, shown)
        assert "Evil\\x1b]0;pwned\\x07" in shown, argv


def test_a_plan_title_and_note_reach_the_markdown_report_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = tmp_path / "plan.toml"
    meta = {"title": f"Review{ESCAPES}\nsecond line", "note": f"one\ntwo{ESCAPES}"}
    plan.write_text(tomli_w.dumps({"model": {"preset": "llama-7b"}, "meta": meta}))
    assert run(["export", str(plan), "--format", "markdown", "-o", "-"]) == 0
    out = capsys.readouterr().out
    assert not any(ch in out for ch in "\x1b\x07\x9b\u202e")
    assert out.startswith("# Review\\x1b]0;pwned\\x07\\x1b[2J\\x9b31m\\u202e\\nsecond line\n")
    assert "> one\n> two\\x1b]0;pwned" in out
    assert run(["export", str(plan), "--format", "markdown", "-o", str(tmp_path / "r.md")]) == 0
    assert "\x1b" not in (tmp_path / "r.md").read_text()


# -- round trips (issue 39.4) ---------------------------------------------------------------------------------


def test_an_export_on_an_unknown_detected_gpu_loads_back_to_the_same_estimate(tmp_path: Path) -> None:
    """On a machine whose GPU has no preset, ``export`` wrote ``gpu = "detected-..."`` and the file failed to load,
    on that machine too (a plan file never runs nvidia-smi): the file now carries the preset."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    smi = bindir / "nvidia-smi"
    smi.write_text('#!/bin/sh\necho "NVIDIA Foo 9000, 40000"\necho "NVIDIA Foo 9000, 40000"\n')
    smi.chmod(0o755)
    base = {**os.environ, "VRAMPLAN_CONFIG_DIR": str(tmp_path / "none")}
    here = {**base, "VRAMPLAN_DETECT": "1", "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"}
    r = cli("export", "-o", "plan.toml", cwd=tmp_path, env=here)
    assert r.returncode == 0, r.stderr
    assert 'gpu = "detected-foo-9000"' in (tmp_path / "plan.toml").read_text()
    detected = cli("estimate", "--brief", cwd=tmp_path, env=here)
    for env in (here, {**base, "VRAMPLAN_DETECT": "0"}):  # this machine, and one without that GPU
        loaded = cli("estimate", "--brief", "plan.toml", cwd=tmp_path, env=env)
        assert loaded.returncode in (0, 1) and loaded.stderr == "", loaded.stderr
        assert loaded.stdout == detected.stdout != ""


def test_an_export_on_user_presets_loads_back_for_a_colleague(tmp_path: Path) -> None:
    """A plan on a user model preset (and a user GPU) failed to load for a colleague although every model key was in
    the file: the file carries both, and another process without that folder reads the same estimate."""
    from vramplan.core.plan.catalogue import presets

    cfg = tmp_path / "mine"
    (cfg / "models").mkdir(parents=True)
    (cfg / "hardware").mkdir()
    model = {"name": "LLaMA-7B, 30 layers", "source": "mine", "config": {"preset": "llama-7b", "num_hidden_layers": 30}}
    (cfg / "models" / "mymodel.toml").write_text(tomli_w.dumps(model))
    gpu = presets.gpu("a100-80gb").model_dump(exclude={"id", "match"}, exclude_none=True)
    (cfg / "hardware" / "mygpu.toml").write_text(tomli_w.dumps({**gpu, "name": "My GPU", "memory_mib": 61440}))
    base = {**os.environ, "VRAMPLAN_DETECT": "0"}
    mine = {**base, "VRAMPLAN_CONFIG_DIR": str(cfg)}
    picked = ("--model", "mymodel", "--gpu", "mygpu")
    r = cli("export", *picked, "-o", "plan.toml", cwd=tmp_path, env=mine)
    assert r.returncode == 0, r.stderr
    here = cli("estimate", "--json", *picked, cwd=tmp_path, env=mine)
    colleague = {**base, "VRAMPLAN_CONFIG_DIR": str(tmp_path / "colleague")}
    there = cli("estimate", "--json", "plan.toml", cwd=tmp_path, env=colleague)
    assert there.returncode in (0, 1) and there.stderr == "", there.stderr
    mine_json, theirs = strict_json(here.stdout), strict_json(there.stdout)
    assert theirs["plan"]["model"]["num_hidden_layers"] == 30 and theirs["plan"]["hardware"]["gpu"] == "mygpu"
    assert "[presets.models.mymodel]" in (tmp_path / "plan.toml").read_text()
    assert theirs == mine_json


def test_measure_refuses_a_plan_past_free_host_memory_before_building(tmp_path: Path) -> None:
    """Issue 39.5: ``measure --device cpu`` of an 8B full plan (150 GiB predicted) on a machine with 23 GiB free
    started building and died on a failed allocation. It is refused in one line before torch is even imported."""
    import importlib.util

    if any(importlib.util.find_spec(name) is None for name in ("torch", "transformers", "peft")):
        pytest.skip("the measure extra is not installed (measure then says so in one line, before this check)")
    code = (
        "import sys\n"
        "from vramplan.machine import host\n"
        "host.available_memory_bytes = lambda *a: 23 << 30\n"
        "from vramplan.__main__ import main\n"
        "code = main(sys.argv[1:])\n"
        "print('torch imported' if 'torch' in sys.modules else 'torch not imported')\n"
        "sys.exit(code)\n"
    )
    argv = ["measure", "--model", "llama-3.1-8b", "--gpus", "1", "--device", "cpu"]
    cmd = [sys.executable, "-c", code, *argv]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=HANG_S)
    assert r.returncode == 2 and r.stdout == "torch not imported\n", r
    line = one_error_line(r.stderr)
    assert "predicted peak here is 150." in line and "more than the 23.00 GiB of host memory available" in line
    assert line.endswith("not built (--force runs it anyway)") and list(tmp_path.iterdir()) == []


def test_a_training_config_with_two_bad_values_is_one_line_naming_each(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 39.6: a TRL config with two bad values took two lines. Now one line names the file once and each bad
    key (as a plan file's bad keys are: tests/cli/test_plan_file_errors_cli.py), so both are fixed at once; no
    traceback, exit 2, nothing on stdout."""
    trl = tmp_path / "grpo.yaml"
    trl.write_text(
        "model_name_or_path: meta-llama/Llama-3.1-8B\nbeta: 0.1\nnum_generations: 4\n"
        "max_prompt_length: 99999999999\nmax_completion_length: 99999999999\n"
    )
    assert run(["estimate", "--from", str(trl)]) == 2
    captured = capsys.readouterr()
    errors = [x for x in captured.err.splitlines() if "read from" not in x]
    assert errors == [
        f"vramplan: {trl}: rl.max_prompt_length: must be less than or equal to 10000000 (got 99999999999)"
        " | rl.max_completion_length: must be less than or equal to 10000000 (got 99999999999)"
    ]
    assert captured.out == "" and "Traceback" not in captured.err


def test_the_planner_without_a_terminal_is_one_line_not_a_hang(tmp_path: Path) -> None:
    """Issue 39: started with standard input or error not a terminal (cron, CI, ``< /dev/null``) the planner could
    never read a key and never exited; the subprocess's timeout is the hang guard. Textual reads standard input
    and draws on standard error: both are checked (here a file and a pipe)."""
    plan = tmp_path / "plan.toml"
    plan.write_text('[model]\npreset = "llama-7b"\n')
    for args in ((), (str(plan),)):
        r = cli(*args, stdin=subprocess.DEVNULL, env={**os.environ, "VRAMPLAN_DETECT": "0"})
        assert r.returncode == 2 and r.stdout == "", r
        line = one_error_line(r.stderr)
        assert "the planner needs a terminal (standard input and standard error are not one)" in line, line
    import pty

    main_fd, terminal = pty.openpty()  # standard input a terminal, standard error still a pipe
    try:
        r = cli(str(plan), stdin=terminal, env={**os.environ, "VRAMPLAN_DETECT": "0"})
    finally:
        os.close(main_fd)
        os.close(terminal)
    assert r.returncode == 2 and "(standard error is not one)" in one_error_line(r.stderr), r


@pytest.mark.parametrize(
    ("terms", "expected"),
    [
        # within the file's bound (1 PiB then), past [overhead]'s: was "overhead.cuda_context_mib: ..." without the file
        ({"cuda_context_bytes": 1 << 45}, "terms.cuda_context_bytes: must be from 0 to 1,099,511,627,776 bytes"),
        # a gap of ten times the peak: was applied as "100%"
        (
            {"cuda_context_bytes": 1 << 29, "allocator_gap_bytes": 10 << 30, "allocated_peak_bytes": 1 << 30},
            "terms.allocator_gap_bytes: more than allocated_peak_bytes",
        ),
    ],
)
def test_calibration_values_are_checked_against_what_they_apply_to(
    tmp_path: Path, terms: dict[str, int], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cal = tmp_path / "cal.toml"
    cal.write_text(tomli_w.dumps({"format_version": 1, "terms": terms}))
    for argv in (["estimate", "--calibration", str(cal)], ["export", "-o", "-", "--calibration", str(cal)]):
        assert run(argv) == 2
        line = one_error_line(capsys.readouterr().err)
        assert line.startswith(f"vramplan: {cal}: ") and expected in line, line
    cal.write_text(tomli_w.dumps({"format_version": 1, "terms": {"cuda_context_bytes": 1 << 40}}))  # the bound itself
    assert run(["estimate", "--calibration", str(cal), "--json"]) == 0
    assert strict_json(capsys.readouterr().out)["plan"]["overhead"]["cuda_context_mib"] == 1 << 20
