"""Errors shared across layers. `ConfigError` lives here, not in `config`, because the
plugins validate their own arguments (pluginConfig) and `config` calls them: both sides
import it without importing each other."""

from __future__ import annotations


class ConfigError(ValueError):
    """A bad setting; the message names the key."""
