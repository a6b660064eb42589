"""`python -m tests.deploy.regen`: rewrite the PrometheusRule from manifests/prometheus/
rules.yaml (the one source of the rules; test_manifests checks they are equal)."""

from __future__ import annotations

from pathlib import Path

import yaml

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"

HEADER = ("# Generated from manifests/prometheus/rules.yaml (tests/deploy keep them equal):\n"
          "# edit that file, then run `python -m tests.deploy.regen`.\n")


def main() -> None:
    rules = yaml.safe_load((MANIFESTS / "prometheus" / "rules.yaml").read_text())
    doc = {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
           "metadata": {"name": "scheduling-extender", "namespace": "scheduling-extender",
                        "labels": {"release": "kube-prometheus-stack"}},
           "spec": rules}
    target = MANIFESTS / "components" / "prometheus-operator" / "prometheusrule.yaml"
    target.write_text(HEADER + yaml.safe_dump(doc, sort_keys=False, width=200))


if __name__ == "__main__":
    main()
