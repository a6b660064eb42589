"""Test doubles that speak real wire protocols on 127.0.0.1 (the API server, ...)."""
