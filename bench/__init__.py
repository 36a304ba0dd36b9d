"""Benchmarks and the scripts that produce the repository's data; run them from the repository root as modules
(`python -m bench.data.accuracy`), so that they import each other as `bench.*` and never reach into `tests/`."""
