"""The step-time model: ``step.step_time(plan)``, term by term; FLOPs and memory traffic (``flops``), links and
collectives (``comm``), the result (``result``) and its formulas (``explain``). Imports `vramplan.core.plan` and
`vramplan.core.memory` (the bytes the step moves)."""
