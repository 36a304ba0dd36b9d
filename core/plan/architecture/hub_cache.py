"""The local Hugging Face Hub cache: where it is, and the config.json a repo id's snapshot holds. Offline: it
reads folders and two small files, never the network.

The layout and the lookup are huggingface_hub's (read at v2.4): the cache is ``$HF_HUB_CACHE``, else the legacy
``$HUGGINGFACE_HUB_CACHE``, else ``$HF_HOME/hub``, else ``$XDG_CACHE_HOME/huggingface/hub``, else
``~/.cache/huggingface/hub`` (``constants.py``: ``~`` and ``$VARS`` expanded); a repo ``ORG/NAME`` lives in
``models--ORG--NAME`` (``file_download.repo_folder_name``), ``refs/main`` holds the commit the branch pointed at
when it was downloaded, ``snapshots/<commit>/config.json`` is the file (a symlink into ``blobs/``), and
``.no_exist/<commit>/config.json`` records that the repo has none (``file_download.try_to_load_from_cache``).
Without ``refs/main`` (a download pinned to a commit) the one snapshot that holds a config.json is taken; several
are a question only the user can answer. Symlinks are followed (the cache is made of them); a dangling one, a loop,
a FIFO or a huge file is one `PlanError` naming the path, as for any config.json (`read_regular`, `path_problem`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from vramplan.core.plan.helpers.errors import PlanError, shown
from vramplan.core.plan.helpers.readfile import path_problem, read_regular

# huggingface_hub utils/_validators.py validate_repo_id: ``ORG/NAME``, each part of letters, digits, "-", "_", "."
# (1-96 characters, not starting or ending with "-" or "."), no "--" or "..", not ending in ".git". The namespace
# is required here: a bare name is a preset id.
_PART = r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?"
REPO_ID = re.compile(rf"({_PART})/({_PART})")
_REVISION = re.compile(r"[A-Za-z0-9_.-]{1,255}")  # a commit hash or a branch/tag name: one folder, no separator
MAX_REF_BYTES = 4096  # refs/main holds a 40-character commit hash
MAX_SNAPSHOTS = 10_000  # folders of snapshots/ looked at without refs/main


def is_repo_id(text: str) -> bool:
    """Whether ``text`` is a Hugging Face model id ``ORG/NAME`` as huggingface_hub validates one."""
    return bool(REPO_ID.fullmatch(text)) and ".." not in text and "--" not in text and not text.endswith(".git")


def _env_path(*names: str) -> str | None:
    for name in names:
        value = os.environ.get(name)
        if value:  # an empty variable is unset (huggingface_hub would read it as the working directory)
            return value
    return None


def hub_cache_dir() -> Path:
    """The Hub cache folder, as huggingface_hub's ``constants.HF_HUB_CACHE`` finds it."""
    explicit = _env_path("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE")
    if explicit is None:
        home = _env_path("HF_HOME") or os.path.join(_env_path("XDG_CACHE_HOME") or "~/.cache", "huggingface")
        explicit = os.path.join(home, "hub")
    if "\0" in explicit:
        raise PlanError("a path cannot contain a NUL character", "the Hugging Face cache (HF_HUB_CACHE / HF_HOME)")
    return Path(os.path.expandvars(os.path.expanduser(explicit)))


def repo_folder(repo_id: str) -> str:
    """``models--ORG--NAME`` (huggingface_hub ``repo_folder_name``)."""
    return "--".join(("models", *repo_id.split("/")))


def repo_id_of(path: str | Path) -> str | None:
    """``ORG/NAME`` when ``path`` is a config.json inside a Hub cache snapshot (``.../models--ORG--NAME/snapshots/
    <revision>/config.json``), else None: the model's name, where the file itself has none."""
    parts = Path(path).parts
    if len(parts) < 4 or parts[-3] != "snapshots" or not parts[-4].startswith("models--"):
        return None
    org_name = parts[-4].removeprefix("models--").split("--")
    candidate = "/".join(org_name)
    return candidate if len(org_name) == 2 and is_repo_id(candidate) else None


@dataclass(frozen=True)
class CachedConfig:
    """A config.json of the Hub cache: the file, the revision it belongs to, and how that revision was chosen."""

    repo_id: str
    path: Path  # .../snapshots/<revision>/config.json (not resolved: the name says which repo it is)
    revision: str
    pinned_by: str  # "refs/main", or "the only snapshot" (no refs/main)


def cached_config(repo_id: str, cache: Path | None = None) -> CachedConfig | None:
    """The cached config.json of ``repo_id``'s main revision, or None when the cache does not hold it (no folder
    for the repo, no snapshot of the revision, none with a config.json, or the Hub said it has none). A cache that
    holds it but cannot be read (a dangling ``refs/main``, a revision that is no folder name, several snapshots and
    no ``refs/main``) is a `PlanError` naming the path."""
    folder = (hub_cache_dir() if cache is None else cache) / repo_folder(repo_id)
    try:
        return _lookup(repo_id, folder)
    except OSError as exc:  # a folder of the cache not readable (permissions)
        why = (exc.strerror or str(exc)).lower()
        raise PlanError(f"cannot read the Hugging Face cache: {why}", str(folder)) from None


def _lookup(repo_id: str, folder: Path) -> CachedConfig | None:
    problem = path_problem(folder)
    if problem and problem != "no such file":
        raise PlanError(f"cannot read the Hugging Face cache: {problem}", str(folder))
    if problem or not folder.is_dir():
        return None
    ref = folder / "refs" / "main"
    pinned_by = "refs/main" if ref.is_symlink() or ref.exists() else "the only snapshot"
    revision = _read_ref(ref) if pinned_by == "refs/main" else _only_snapshot(folder)
    if revision is None:
        return None
    if (folder / ".no_exist" / revision / "config.json").is_file():
        return None  # the Hub answered that this revision has no config.json
    path = folder / "snapshots" / revision / "config.json"
    if not (path.is_symlink() or path.exists()):
        return None
    return CachedConfig(repo_id, path, revision, pinned_by)


def _read_ref(ref: Path) -> str:
    """The revision ``refs/main`` names (read as any small user file: regular, bounded, UTF-8)."""
    try:
        text = read_regular(ref, MAX_REF_BYTES).decode("utf-8").strip()
    except UnicodeDecodeError:
        raise PlanError("not a revision: not UTF-8 text", str(ref)) from None
    if not _REVISION.fullmatch(text) or text in (".", ".."):
        raise PlanError(f"not a revision (a commit hash): {shown(text)}", str(ref))
    return text


def _only_snapshot(folder: Path) -> str | None:
    """Without ``refs/main``: the one snapshot holding a config.json (None if none does); several are an error."""
    snapshots = folder / "snapshots"
    found: list[str] = []
    try:
        with os.scandir(snapshots) as entries:
            for i, entry in enumerate(entries):
                if i >= MAX_SNAPSHOTS:
                    break
                config = Path(entry.path) / "config.json"
                if _REVISION.fullmatch(entry.name) and (config.is_symlink() or config.exists()):
                    found.append(entry.name)
    except (NotADirectoryError, FileNotFoundError):
        return None
    except OSError as exc:
        raise PlanError(f"cannot read: {(exc.strerror or str(exc)).lower()}", str(snapshots)) from None
    if len(found) > 1:
        revs = ", ".join(sorted(found)[:3]) + (", ..." if len(found) > 3 else "")
        raise PlanError(
            f"{len(found)} snapshots ({revs}) and no refs/main: give --hf-config with the one you mean", str(snapshots)
        )
    return found[0] if found else None
