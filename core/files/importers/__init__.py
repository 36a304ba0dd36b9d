"""Importing the training settings of an existing config into a plan (``vramplan estimate --from FILE``).

One module per format, each a ``read(data, log)`` that turns the file's keys into plan keys through an
`core.files.importers.record.ImportLog` (every key read or ignored is recorded there, never silently dropped):
`deepspeed` (DeepSpeed JSON), `accelerate` (accelerate config YAML), `torchtune` (recipe YAML), `axolotl` and
`llamafactory` (their YAML). `reading` reads a file safely (a regular file, a size limit, no alias bombs or deep
nesting), `detect` tells the format from the content, `apply` lays the settings over a plan.
"""
