"""Matching rules shared by plugins: tolerations, node selectors, values."""
