"""The plan and what it is made of: the frozen `Plan` (``plan``), its tables (``model``, ``training``, ``strategy``,
``stack`` with the stacks' defaults in ``stack_defaults``, ``advice``), what a node holds beside its GPUs (``node``),
architectures and parameter counts (``arch``), precision regimes and optimizers (``precision``), the presets
catalogue (``presets``), config.json import (``hfconfig``), nvidia-smi's output matched to a preset (``detect``),
the ``--set`` key syntax (``keys``) and the words that describe a plan (``describe``); with the basics every layer
uses: errors, units, paths, TOML reading and the memo registry. Imports nothing else of `vramplan.core`."""
