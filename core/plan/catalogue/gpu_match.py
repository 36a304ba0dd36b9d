"""GPUs as ``nvidia-smi`` reports them, matched to a hardware preset: the pure half of GPU detection (the other,
running ``nvidia-smi``, is `vramplan.machine.nvidia_smi`; core starts no process).

``nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits`` prints one line per GPU, e.g.
``NVIDIA H100 80GB HBM3, 81559`` (memory in MiB). `detected_from` parses that text (`parse`) and matches the most
common model to a preset through the names in each preset's ``match`` list (then a looser comparison of the names);
a GPU no preset knows becomes a runtime preset with the reported memory and placeholder throughput figures,
labelled as such. Output that does not parse: None, and callers fall back silently to the documented default.

`plan_on`: the default plan on detected GPUs (the plan vramplan starts from without a plan file).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import NamedTuple

from vramplan.core.plan.catalogue import presets
from vramplan.core.plan.catalogue.specs import GpuSpec
from vramplan.core.plan.helpers.errors import clip, printable

QUERY = ("--query-gpu=name,memory.total", "--format=csv,noheader,nounits")  # nvidia-smi's: what `parse` reads


class DetectedGpus(NamedTuple):
    """What nvidia-smi reported, and the preset it maps to. (A record: a dataclass took 1.5 ms to define at start.)"""

    name: str  # as nvidia-smi reports it ("NVIDIA H100 80GB HBM3")
    memory_mib: int
    gpus: int  # GPUs of this model on the machine
    gpu_id: str  # the matching preset, or the runtime preset registered for an unknown GPU
    matched: bool  # a known preset (False: an unknown GPU, figures other than memory are placeholders)
    others: tuple[tuple[str, int], ...] = ()  # other models on the machine: (name, count)

    @property
    def label(self) -> str:
        """``detected: 8 x H100 80GB HBM3`` (what the TUI shows next to the hardware): the reported name without
        its vendor prefix."""
        short = self.name.removeprefix("NVIDIA ").strip() or self.name
        text = f"detected: {self.gpus} x {short}"
        if not self.matched:
            text += f" ({self.memory_mib / 1024:.1f} GiB, unknown GPU: memory only)"
        return text


MAX_GPUS = 4096  # lines of output read (a node has 8-16 GPUs)
MAX_NAME = 96  # characters of a GPU name kept
MAX_MEMORY_MIB = 2**24  # 16 TiB: the GPU presets' bound (a larger figure is not a GPU's memory)
_ANSI = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)?|[@-Z\\-_])")


def clean_name(name: str) -> str:
    """A GPU name as vramplan shows it: terminal escape sequences removed, other control characters escaped,
    cut to `MAX_NAME` characters (a name reaches the terminal and the plan's labels)."""
    return clip(printable(_ANSI.sub("", name)).strip(), MAX_NAME)


def parse(output: str) -> list[tuple[str, int]]:
    """(name, memory MiB) per GPU line; an empty list if any line does not parse. The memory is ASCII digits
    only (``str.isdigit`` also takes superscripts, which ``int`` refuses), at most `MAX_MEMORY_MIB`."""
    gpus = []
    lines = output.strip().splitlines()
    if len(lines) > MAX_GPUS:
        return []
    for line in lines:
        name, sep, mem = line.rpartition(",")
        name, mem = clean_name(name), mem.strip()
        if not sep or not name or not re.fullmatch(r"[0-9]{1,9}", mem) or not 0 < int(mem) <= MAX_MEMORY_MIB:
            return []
        gpus.append((name, int(mem)))
    return gpus


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "", text.lower().replace("nvidia", ""))


def match_preset(name: str, memory_mib: int) -> str | None:
    """The preset whose ``match`` list holds this name (case-insensitive), else one whose name or match entries
    equal it ignoring case, spaces and punctuation; among several, the one closest in memory."""
    reg = presets.registry()
    gpus = [reg.gpus[i] for i in reg.gpus]
    exact = [g for g in gpus if name.lower() in (m.lower() for m in g.match)]
    if not exact:
        key = _norm(name)
        exact = [g for g in gpus if key in {_norm(m) for m in (*g.match, g.name)}]
    if not exact:
        return None
    return min(exact, key=lambda g: abs(g.memory_mib - memory_mib)).id


def _custom_id(name: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower().replace("nvidia", "")).strip("-")
    return f"detected-{slug or 'gpu'}"


def custom_spec(name: str, memory_mib: int) -> GpuSpec:
    """A preset for a GPU no preset knows: the reported memory; the other figures are placeholders (a mid-range
    Ampere-class part) that only time estimates read, named so in ``note`` and ``source``."""
    return GpuSpec(
        id=_custom_id(name),
        name=name,
        generation="ampere",
        memory_mib=memory_mib,
        bf16=True,
        bf16_tflops=100.0,
        fp16_tflops=100.0,
        fp32_tflops=20.0,
        memory_bandwidth_gbs=1000.0,
        gpu_link="unknown (placeholder: PCIe Gen4 x16)",
        gpu_link_gbs=32.0,
        host_link="unknown (placeholder: PCIe Gen4 x16)",
        host_link_gbs=32.0,
        internode_gbs=12.5,
        flash_attention=True,
        sm_count=80,
        matmul_efficiency=0.8,
        kernel_overhead_us=2.0,
        time_source="placeholders: a detected GPU without a preset",
        match=(name,),
        source="detected with nvidia-smi: name and memory.total; every other figure is a placeholder",
        note="unknown GPU: memory as reported by nvidia-smi; throughput and links are placeholders "
        "(add a hardware preset in ~/.config/vramplan/hardware/ to set them)",
    )


def detected_from(output: str) -> DetectedGpus | None:
    """The GPUs of nvidia-smi's CSV ``output`` (`QUERY`) mapped to a preset, or None when it does not parse.
    Registers a runtime preset for an unknown GPU, so the plan can name it."""
    gpus = parse(output)
    if not gpus:
        return None
    counts = Counter(name for name, _ in gpus)
    name, count = counts.most_common(1)[0]
    memory = max(m for n, m in gpus if n == name)
    others = tuple((n, c) for n, c in counts.items() if n != name)
    gpu_id = match_preset(name, memory)
    if gpu_id is not None:
        return DetectedGpus(name, memory, count, gpu_id, True, others)
    spec = custom_spec(name, memory)
    presets.register_gpu(spec, origin="detected")
    return DetectedGpus(name, memory, count, spec.id, False, others)
