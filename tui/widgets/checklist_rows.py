"""The rows of the Checklist pane: the fit advisor (suggestions, largest micro-batch, fewest GPUs), then the
checklist's three groups and their items. Each row is Content wrapped to the list's width with a hanging indent;
a row is selectable when Enter (or space) does something with it."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from textual.content import Content

from vramplan.core.advice.advisor import Advice
from vramplan.core.advice.checklist import GROUPS, Checklist
from vramplan.core.advice.checks.base import Item
from vramplan.core.advice.fit_limits import layout_text, seq_len_text
from vramplan.core.advice.moves import TIER_TEXT
from vramplan.core.memory.record import Estimate
from vramplan.core.plan.helpers.units import gib_text as gib

# Where the advisor's safety margin comes from (`core.advice.margin`), in a word for the pane's heading.
MARGIN_WORDS = {"set": "as set", "expected error": "the estimate's error", "fragmentation": "fragmentation"}

# Status tags: a word as well as a colour, so they read the same under NO_COLOR.
STATUS_TAGS = {"ok": "✔ ok", "warn": "! warn", "fail": "✘ FAIL"}
STATUS_STYLES = {"ok": "$text-success", "warn": "$text-warning", "fail": "$text-error bold", "manual": "$text-accent"}
INDENT = 2


@dataclass(frozen=True)
class Row:
    id: str
    prompt: Content
    selectable: bool


def wrapped(head: Content, body: list[Content], width: int, indent: int = INDENT) -> Content:
    """``head`` wrapped to ``width``, its continuation lines and each body line indented under it."""
    return _wrapped(head, tuple(body), width, indent)


@lru_cache(maxsize=512)
def _wrapped(head: Content, body: tuple[Content, ...], width: int, indent: int) -> Content:
    """(Memoised: wrapping is most of the cost of the rows, and most rows do not change with the plan.)"""
    inner = max(10, width - indent)
    first, *rest = head.wrap(max(10, width)) or [head]
    lines = [first]
    if rest:
        lines += [line.pad_left(indent) for line in Content(" ").join(rest).wrap(inner)]
    for part in body:
        lines += [line.pad_left(indent) for line in part.wrap(inner)]
    return Content("\n").join(lines)


def heading(text: str, note: str = "") -> Content:
    head = Content.styled(text, "bold $text-primary")
    return head + Content.styled(f"  {note}", "dim") if note else head


def status_tag(item: Item) -> str:
    if item.status == "manual":
        return "☑ done" if item.ticked else "☐ check"
    return STATUS_TAGS[item.status]


def item_row(item: Item, width: int) -> Row:
    fix = item.fix.text() if item.fix is not None else None
    prompt = _item_prompt(status_tag(item), item.status, item.ticked, item.title, item.detail, fix, width)
    return Row(item.id, prompt, item.fix is not None or item.status == "manual")


def _item_prompt(tag: str, status: str, ticked: bool, title: str, detail: str, fix: str | None, width: int) -> Content:
    head = Content.assemble((f"{tag:<8}", STATUS_STYLES[status]), (title, "bold"))
    body = [Content.styled(detail, "dim") if status == "ok" else Content(detail)]
    if fix is not None:
        body.append(Content.assemble(("⏎ fix: ", "$text-accent bold"), fix))
    if status == "manual":
        hint = "space: not checked yet" if ticked else "space: mark as checked (kept in the plan)"
        body.append(Content.styled(hint, "dim"))
    return wrapped(head, body, width)


def checklist_rows(cl: Checklist, width: int) -> list[Row]:
    rows: list[Row] = []
    for group, label in GROUPS.items():
        rows.append(Row(f"group.{group}", heading(label), False))
        rows += [item_row(item, width) for item in cl.group(group)]
    return rows


def advice_rows(advice: Advice | None, est: Estimate, width: int, error: str = "") -> list[Row]:
    """The advisor's rows for the current estimate; ``advice`` for another plan (still being computed for this one)
    is shown greyed out and cannot be applied."""
    current = advice is not None and advice.plan == est.plan
    if error:
        return [Row("advice.head", heading("Fit advisor", f"failed: {error}"), False)]
    if advice is None:
        return [Row("advice.head", heading("Fit advisor", "working…"), False)]
    note = "" if current else "updating…"
    keep = f"{advice.goal_headroom:.0%} free ({MARGIN_WORDS[advice.margin.kind]})"  # the safety margin, and whence
    if not advice.needed:
        title = f"fits with {est.headroom_fraction:.0%} free: no change needed (margin {keep})"
    elif advice.suggestions:
        title = f"{len(advice.suggestions)} changes that leave {keep}, by step time"
    else:
        title = f"nothing tried leaves {keep}"
    rows = [Row("advice.head", wrapped(heading("Fit advisor", note or title), [], width), False)]
    same: bool | None = None
    for n, s in enumerate(advice.suggestions):
        if s.same_model != same:
            same = s.same_model
            label = "same model" if same else TIER_TEXT[2]
            rows.append(Row(f"advice.tier{int(not same) * 2}", Content.styled(label, "italic dim"), False))
        e = s.effect
        kind = (f" ({TIER_TEXT[1]})", "dim") if s.tier == 1 else ""
        head = Content.assemble((f"{n + 1:>2}. ", "$text-accent"), (s.title, "bold"), kind)
        body = [
            Content(f"{gib(e.memory_on_gpu)} GiB ({e.fit_text()}), step ×{e.relative_step_time:.2f}"),
            Content.styled(" ".join(e.set_args()), "dim"),
        ]
        rows.append(Row(f"advice.s{n}", wrapped(head, body, width, indent=4), current))
    rows += _limits(advice, width, current)
    return rows


def _limits(advice: Advice, width: int, current: bool) -> list[Row]:
    plan = advice.plan
    mb, now = advice.max_micro_batch_size, plan.training.micro_batch_size
    if mb == 0:
        text, can = "no micro-batch fits as is, not even 1", False
    else:
        can = mb != now
        text = f"largest micro-batch that fits as is: {mb}" + (" (this plan's)" if not can else "")
    rows = [Row("advice.micro_batch", _action(text, can, width), current and can)]
    seq, now_seq = advice.max_seq_len, plan.training.seq_len
    if seq == 0:
        text, can = "no sequence length fits as is, not even 1 token", False
    else:
        can = seq != now_seq
        text = f"largest sequence length that fits as is: {seq_len_text(seq, advice.context_len)}"
        text += " (this plan's)" if not can else ""
    rows.append(Row("advice.seq_len", _action(text, can, width), current and can))
    gpus, layout = advice.min_gpus, advice.min_gpus_changes
    if gpus is None:
        text, can = "no number of GPUs fits with these strategies", False
    else:
        can = gpus != plan.hardware.total_gpus
        text = f"fewest GPUs that fit with these strategies: {gpus} ({layout_text(layout)})"
    rows.append(Row("advice.min_gpus", _action(text, can, width), current and can))
    return rows


def _action(text: str, can: bool, width: int) -> Content:
    head = Content.assemble(("⏎ " if can else "  ", "$text-accent bold"), text)
    return wrapped(head, [], width)
