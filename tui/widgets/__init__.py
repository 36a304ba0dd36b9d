"""Widgets of the planner: the plan panes (model, hardware, training, strategies) and the memory gauges."""
