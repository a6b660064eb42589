"""The Helm chart, generated from the kustomize overlays by tests/deploy/regen.py: it is
in sync with them, a real `helm` lints and renders it, its defaults render exactly the
`second-scheduler` overlay (and `with-prometheus-operator` when enabled), its values
take effect, and everything it renders validates strictly."""

from __future__ import annotations

import filecmp

import pytest
import regen
import yaml
from deploy_tools import ROOT, run, tool, validate

CHART = ROOT / "charts" / "scheduling-extender"


def helm_template(*values: str) -> list[dict]:
    args = [tool("helm"), "template", "scheduling-extender", str(CHART)]
    for value in values:
        args += ["--set", value]
    return [doc for doc in yaml.safe_load_all(run(args)) if doc]


def key(obj: dict) -> tuple[str, str, str]:
    return regen.identity(obj)


def as_map(objects: list[dict]) -> dict:
    return {key(o): o for o in objects}


def test_the_chart_is_generated_from_the_overlays(tmp_path):
    tool("kubectl")  # regen renders the overlays
    regen.chart(tmp_path / "chart")
    diff = filecmp.dircmp(CHART, tmp_path / "chart")
    stale = []

    def collect(d, prefix=""):
        stale.extend(prefix + n for n in d.left_only + d.right_only + d.diff_files)
        for name, sub in d.subdirs.items():
            collect(sub, f"{prefix}{name}/")

    collect(diff)
    assert not stale, f"run `python -m tests.deploy.regen`; stale: {stale}"


def test_helm_lints_the_chart():
    out = run([tool("helm"), "lint", str(CHART)])
    assert "0 chart(s) failed" in out


@pytest.mark.parametrize(("values", "overlay"), [
    ((), "second-scheduler"),
    (("prometheusOperator.enabled=true",), "with-prometheus-operator"),
])
def test_defaults_render_the_overlay(values, overlay):
    rendered = helm_template(*values)
    expected = regen.render(overlay)
    assert as_map(rendered) == as_map(expected)
    for obj in rendered:
        validate(obj, f"helm template {' '.join(values)}")


def test_values_take_effect():
    objects = as_map(helm_template("image.repository=registry.local/ext", "image.tag=9.9.9",
                                   "kubeScheduler.image=registry.local/ks:v1.36.1", "replicas=3"))
    dep = objects[("Deployment", "scheduling-extender", "extended-scheduler")]
    images = {c["name"]: c["image"] for c in dep["spec"]["template"]["spec"]["containers"]}
    assert images == {"extender": "registry.local/ext:9.9.9", "kube-scheduler": "registry.local/ks:v1.36.1"}
    assert dep["spec"]["replicas"] == 3
    validate(dep, "helm template with values")
