"""What vramplan reads from the machine it runs on, for the front ends: the versions installed in a Python
environment (``environment``) and the host's memory (``host``). Beside `vramplan.core`, which stays the pure domain
(it reads no machine): `vramplan.machine` may import core, core never imports it; the CLI and the TUI use both."""
