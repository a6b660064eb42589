"""Scheduling plugins, one module each, named as upstream names them."""
