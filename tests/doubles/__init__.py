"""Tests of the API-server double (`testing/apiserver.py`)."""
