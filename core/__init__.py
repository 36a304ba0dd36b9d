"""vramplan's core: the pure domain, in layers by concept. Never imports Textual or Rich.

- `plan`: the plan model, presets catalogue, config.json import, key syntax, describing a plan (imports nothing
  else of core);
- `memory`: the estimator, with the activation model as its own sub-package (imports plan);
- `time`: the step-time model (imports plan and memory);
- `advice`: the checklist, the fit advisor and what-if (imports plan, memory, time);
- `files`: plan files, exports and the review report (imports all of the above).

Importing this package (or any sub-package) builds nothing: each ``__init__`` is a docstring.
"""
