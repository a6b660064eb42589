"""Scheduling plugins, one module each, named as upstream names them; `registry` lists
the ones the engine runs."""
