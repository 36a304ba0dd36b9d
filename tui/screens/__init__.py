"""Screens: the planner and the help screen."""
