"""Fake Python environments for the tests of `vramplan.machine.environment` and ``--stack-from``: a venv-shaped
folder of dist-info folders, and the hostile things a folder can hold where a METADATA should be."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

SITE = "lib/python3.11/site-packages"


def metadata(name: str, version: str) -> str:
    return f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nSummary: x\n\nVersion: 9.9.9 (the description)\n"


def make_env(root: Path, packages: dict[str, str], site: str = SITE) -> Path:
    """A venv-shaped folder with one ``NAME-VERSION.dist-info/METADATA`` per package."""
    folder = root / site
    folder.mkdir(parents=True, exist_ok=True)
    for name, version in packages.items():
        info = folder / f"{name}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(metadata(name, version))
    return root


def loop_as_dist_info(site: Path) -> None:
    (site / "peft-1.dist-info").symlink_to("peft-1.dist-info")


def loop_as_metadata(site: Path) -> None:
    (site / "trl-0.1.dist-info").mkdir()
    (site / "trl-0.1.dist-info" / "METADATA").symlink_to("METADATA")


def fifo_as_metadata(site: Path) -> None:
    (site / "accelerate-1.0.dist-info").mkdir()
    os.mkfifo(site / "accelerate-1.0.dist-info" / "METADATA")


def device_as_metadata(site: Path) -> None:
    (site / "deepspeed-0.1.dist-info").mkdir()
    (site / "deepspeed-0.1.dist-info" / "METADATA").symlink_to("/dev/zero")


def headerless_50_mb(site: Path) -> None:
    (site / "bitsandbytes-0.43.1.dist-info").mkdir()
    with open(site / "bitsandbytes-0.43.1.dist-info" / "METADATA", "wb") as f:
        f.truncate(50 * 2**20)  # 50 MB of NUL bytes (sparse): no header at all


def folder_as_metadata(site: Path) -> None:
    (site / "transformers-4.0.dist-info" / "METADATA").mkdir(parents=True)


HOSTILE: dict[str, tuple[Callable[[Path], None], str]] = {
    "peft-1.dist-info/METADATA": (loop_as_dist_info, "Too many levels of symbolic links"),
    "trl-0.1.dist-info/METADATA": (loop_as_metadata, "Too many levels of symbolic links"),
    "accelerate-1.0.dist-info/METADATA": (fifo_as_metadata, "a FIFO"),
    "deepspeed-0.1.dist-info/METADATA": (device_as_metadata, "a device"),
    "bitsandbytes-0.43.1.dist-info/METADATA": (headerless_50_mb, "no Version: line in its first 8 KiB"),
    "transformers-4.0.dist-info/METADATA": (folder_as_metadata, "a folder"),
}
