"""The memory estimator: ``peak.estimate(plan)``, the per-GPU peak of a steady-state step, moment by moment;
model states and sharding (``states``), what autograd saves (the ``activations`` sub-package), the GPU-only
overheads (``overhead``), the result (``result``) and its formulas (``explain``). Imports `vramplan.core.plan`."""
