"""The plan schema: one frozen `Plan` of tables (``[training]``, ``[strategy]``, ``[hardware]``, ...), the options
its keys name as records (objectives, precision regimes, optimizers), and the rules a valid plan obeys."""
