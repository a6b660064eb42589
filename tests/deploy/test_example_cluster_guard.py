"""In a pod, `serve` without any cluster state must refuse to start (not serve the
bundled example and look healthy); the image points EXTENDER_CLUSTER at a mount point."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import EXAMPLES

from extender.config import Config, example_cluster_refusal


def test_refused_in_a_pod_without_cluster_state():
    message = example_cluster_refusal(Config(), {"KUBERNETES_SERVICE_HOST": "10.0.0.1"})
    assert message is not None
    assert "no cluster state configured in a Kubernetes pod" in message
    assert "--in-cluster" in message and "--cluster FILE" in message


def test_allowed_with_an_explicit_cluster_or_outside_a_pod():
    pod = {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}
    assert example_cluster_refusal(Config(cluster=str(EXAMPLES / "cluster.yaml")), pod) is None
    assert example_cluster_refusal(Config(), {}) is None  # the quick start


def test_serve_exits_with_the_message_in_a_pod():
    env = {k: v for k, v in os.environ.items() if not k.startswith("EXTENDER_")}
    env["KUBERNETES_SERVICE_HOST"] = "10.0.0.1"
    proc = subprocess.run([sys.executable, "-m", "extender", "serve", "--listen", "127.0.0.1:1"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "extender: error: no cluster state configured in a Kubernetes pod" in proc.stderr


def test_the_image_points_the_cluster_at_a_mount_point():
    dockerfile = (EXAMPLES.parent / "Dockerfile").read_text()
    assert "EXTENDER_CLUSTER=/etc/extender/cluster.yaml" in dockerfile
