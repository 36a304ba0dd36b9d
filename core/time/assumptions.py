"""The time model's assumptions where a plan or a preset does not say: the default MFU and the host's memory and NVMe
bandwidth, each with where the figure comes from."""

DEFAULT_MFU = 0.45
MFU_SOURCE = (
    "default 0.45: published large runs sit at 0.4-0.55 (Megatron-LM 41.5-56.3% and 530B on 2240 A100 54.2%, "
    "Korthikanti et al. 2022 Table 5 and §6.3; PaLM 540B 46.2%, Chowdhery et al. 2022 Table 3; Llama 3 405B "
    "38-43%, Dubey et al. 2024 Table 4; LLaMA-65B ~48%: 6N·380 tokens/s / 312 TFLOP/s); set training.mfu for "
    "your stack (smaller runs and fine-tuning often reach 0.3-0.4)"
)
HOST_MEMORY_GBS_PER_NODE = 100.0
HOST_MEMORY_SRC = (
    "assumed 100 GB/s of host memory bandwidth per node for CPU Adam, shared by the node's ranks (one 8-channel "
    "DDR4-3200 socket peaks at 204.8 GB/s; CPU Adam streams ~30 B per element: ZeRO-Offload §5.1). Reports: "
    "Qwen-72B ZeRO-3 offload on 4 x 8 A100, ~10 s per step (DeepSpeed issue #6834); Qwen2.5-3B on 2 A100, "
    "2.4-3.1 s per step (DeepSpeed PR #7474)"
)
NVME_GBS_PER_NODE = 25.0
NVME_SRC = "assumed 25 GB/s of NVMe bandwidth per node (a RAID-0 of a few PCIe Gen4 drives), shared by its ranks"
