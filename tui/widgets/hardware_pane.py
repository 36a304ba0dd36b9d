"""The Hardware pane: GPU presets (memory and dense TFLOP/s), GPUs per node and nodes, the price, the node's host
memory and NVMe (the limits of offload), and the stack that runs the training (`stack_fields`)."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.content import Content
from textual.widgets import OptionList, Static

from vramplan.core.memory.record import Estimate
from vramplan.core.plan.catalogue import presets
from vramplan.core.plan.describe import parallel_summary
from vramplan.tui import detection
from vramplan.tui.names import short_gpu
from vramplan.tui.widgets.fields import IntField, NumberField, PlanPane
from vramplan.tui.widgets.preset_list import USER_MARK, PresetList, broken_notes
from vramplan.tui.widgets.stack_fields import node_rows, show_limit, show_stack, stack_rows
from vramplan.tui.widgets.text import show_text


def gpu_rows() -> list[tuple[str, str]]:
    """Name, memory and dense TFLOP/s (``*``: fp16, no bf16); a user preset says ``(user)`` in place of its
    TFLOP/s (shown in the details), so rows stay one line at 80x24; a long name is abbreviated (`names`)."""
    reg = presets.registry()
    rows = []
    for g in reg.sorted_gpus():
        tf = f"{g.bf16_tflops:g}" if g.bf16 else f"{g.fp16_tflops:g}*"
        last = f"{USER_MARK.strip():>9}" if reg.is_user("hardware", g.id) else f"{tf:>6} TF"
        rows.append((g.id, f"{short_gpu(g.name, 16):<16} {g.memory_mib / 1024:>5.1f} GiB {last}"))
    return rows


class HardwarePane(PlanPane):
    TITLE = "Hardware"

    def compose(self) -> ComposeResult:
        yield PresetList("hardware.gpu", id="gpu-list")
        yield Static(id="gpu-details", classes="details")
        yield IntField("hardware.gpus_per_node", "GPUs per node")
        yield IntField("hardware.nodes", "nodes")
        yield NumberField(
            "hardware.price_per_gpu_hour",
            "price / GPU-hour",
            tooltip="for the cost of a token budget (Training pane); empty: the preset's price, if it has one",
        )
        yield from node_rows()
        yield from stack_rows()

    def show_estimate(self, est: Estimate) -> None:
        plan = est.plan
        hw = plan.hardware
        self.query_one("#gpu-list", PresetList).show_rows(gpu_rows(), hw.gpu, broken_notes("hardware"))
        g = presets.gpu(hw.gpu)
        tf = f"{g.bf16_tflops:g} bf16" if g.bf16 else f"{g.fp16_tflops:g} fp16 (no bf16)"
        rest = (
            f"  {g.memory_mib / 1024:.1f} GiB, {tf} TFLOP/s dense\n"
            f"{g.memory_label} {g.memory_bandwidth_gbs:g} GB/s, {g.gpu_link}\n"  # GDDR6 on an RTX A6000, not HBM
            f"{hw.total_gpus} GPU{'s' if hw.total_gpus > 1 else ''}: {parallel_summary(plan)}"
        )
        reg = presets.registry()
        if reg.is_user("hardware", hw.gpu):
            rest += f"\nuser preset: {reg.origin[f'hardware/{hw.gpu}']}"
        det = detection.known()
        if det is not None and det.gpu_id == hw.gpu:
            rest += f"\n{det.label} (nvidia-smi)"
        show_text(
            self.query_one("#gpu-details", Static), Content.from_markup("[b]$name[/b]$rest", name=g.name, rest=rest)
        )
        price = self.fields["hardware.price_per_gpu_hour"]
        assert isinstance(price, NumberField)
        price.set_placeholder(f"{g.price_per_gpu_hour:g} (preset)" if g.price_per_gpu_hour is not None else "unset")
        for key, limit, need, what in (
            ("hardware.host_memory_gib", est.node.host, est.cpu_per_node, "offload to host RAM"),
            ("hardware.nvme_gib", est.node.nvme, est.nvme_per_node, "offload to NVMe"),
        ):
            row = self.fields[key]
            assert isinstance(row, NumberField)
            show_limit(row, limit, need, what, limit.source == est.node.host.source and key.endswith("nvme_gib"))
        show_stack(self, est)

    @on(OptionList.OptionSelected, "#gpu-list")
    def _picked(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        if event.option.id:
            self.post_message(PlanPane.Changed({"hardware.gpu": event.option.id}))
