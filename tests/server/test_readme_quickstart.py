"""The README's quick start, byte for byte: its `curl` requests against the bundled
example cluster (what `make run` serves) answer exactly the JSON printed below them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from extender.config import Config, bundled_cluster
from extender.server.app import create_app
from testing.client import Client

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()
QUICK_START = README[README.index("## Quick start"):README.index("## Install")]
CURL = re.compile(r'^curl -s localhost:8888/(\w+) -d "(.*)"$\n```\n(?:.*\n)*?```json\n(.*?)\n```', re.M)


def examples() -> list[tuple[str, bytes, bytes]]:
    pod = re.search(r"^POD='(.*?)'$", QUICK_START, re.M | re.S).group(1)
    found = [(verb, body.replace('\\"', '"').replace("$POD", pod).encode(), answer.encode())
             for verb, body, answer in CURL.findall(QUICK_START)]
    assert [verb for verb, _, _ in found] == ["filter", "prioritize"]
    return found


@pytest.mark.parametrize(("verb", "body", "answer"), examples(), ids=["filter", "prioritize"])
def test_the_quick_start_answers_are_what_the_server_answers(verb, body, answer):
    client = Client(create_app(Config(cluster=bundled_cluster(), reload_interval=0)))
    response = client.post(f"/{verb}", data=body, content_type="application/json")
    assert response.status_code == 200
    assert response.data == answer
