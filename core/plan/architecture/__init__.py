"""Architectures: the ``[model]`` table (config.json keys), model families, parameter counts, and the import of a
Hugging Face config.json."""
