"""The preset catalogue: the schemas of model and GPU presets, the built-in and user presets, and matching the GPUs
nvidia-smi reports to a preset."""
