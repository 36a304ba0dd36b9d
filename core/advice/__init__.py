"""Advice on a plan: the troubleshooting checklist (``checklist``, its rules in ``checks``), the fit advisor
(``advisor``), the memory moves they share (``moves``) and what-if, which measures a change by re-estimating it
(``whatif``). Imports `vramplan.core.plan`, `memory` and `time`."""
