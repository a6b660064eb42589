"""Errors shared across layers. `ConfigError` lives here, not in `config`, because the
plugins validate their own arguments (pluginConfig) and `config` calls them: both sides
import it without importing each other."""

from __future__ import annotations


class ConfigError(ValueError):
    """A bad setting; the message names the key."""


class ScoringError(RuntimeError):
    """A plugin failed on the pod (e.g. a broken preferred term fails PreScore upstream,
    a malformed spread fails PreFilter): the request is at fault, answered 400."""
