"""The training stack: the ``[stack]`` table (framework and package versions) and what each stack does by default."""
