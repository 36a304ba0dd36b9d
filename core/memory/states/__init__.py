"""Model states per GPU: parameters, gradients, optimizer states and what ZeRO/FSDP, tensor and pipeline
parallelism and offload make of them, each mechanism a module (`model_states` composes them)."""
