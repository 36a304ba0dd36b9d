"""Plans on disk: plan files with ``[meta]`` and ``[estimate]`` (``planfile``), loading and resolving a plan
(``planio``), exports (``export``: TOML, DeepSpeed config (``deepspeed``), the Markdown review (``review``)) and
atomic writes (``safewrite``). Imports every other layer of `vramplan.core`."""
