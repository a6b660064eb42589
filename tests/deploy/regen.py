"""`python -m tests.deploy.regen`: rewrite the files generated from others.

- the PrometheusRule of the kustomize component, from manifests/prometheus/rules.yaml
  (the one source of the rules);
- the chart's copies of what it shares with the kustomize manifests (a chart reads no
  file outside its directory): charts/scheduling-extender/files/ holds the rules, the
  Grafana dashboard and the webhook's match condition;
- the values table of charts/scheduling-extender/README.md, from the `# --` comments of
  values.yaml.

The chart itself is written as a chart (templates, helpers, values): it is not generated.
The kustomize base and the chart are both kept; tests/deploy/test_chart.py checks that
for the same choices they render the same objects, up to names and labels
(docs/operate/deploy.md, "Helm chart and kustomize"). tests/deploy check that the
committed files equal what this writes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
CHART = ROOT / "charts" / "scheduling-extender"
NAMESPACE = "scheduling-extender"
HEADER = ("# Generated from manifests/prometheus/rules.yaml (tests/deploy keep them equal):\n"
          "# edit that file, then run `python -m tests.deploy.regen`.\n")
WEBHOOK = MANIFESTS / "components" / "webhook" / "validatingwebhookconfiguration.yaml"
BEGIN, END = "<!-- values table: begin -->", "<!-- values table: end -->"


def prometheus_rule() -> str:
    rules = yaml.safe_load((MANIFESTS / "prometheus" / "rules.yaml").read_text())
    doc = {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
           "metadata": {"name": "scheduling-extender", "namespace": NAMESPACE,
                        "labels": {"release": "kube-prometheus-stack"}},
           "spec": rules}
    return HEADER + yaml.safe_dump(doc, sort_keys=False, width=200)


def chart_files() -> dict[str, str]:
    """files/NAME -> its text."""
    (hook,) = yaml.safe_load(WEBHOOK.read_text())["webhooks"]
    (condition,) = hook["matchConditions"]
    return {"rules.yaml": (MANIFESTS / "prometheus" / "rules.yaml").read_text(),
            "grafana-dashboard.json": (MANIFESTS / "components" / "prometheus-operator" /
                                       "grafana-dashboard.json").read_text(),
            "webhook-match-condition.cel": condition["expression"] + "\n"}


def values_rows(text: str) -> list[tuple[str, str, str]]:
    """(key path, default, description) of every key a `# --` comment documents."""
    rows, path, doc = [], [], []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("# --"):
            doc = [stripped[4:].strip()]
            continue
        if stripped.startswith("#") and doc:
            doc.append(stripped[1:].strip())
            continue
        m = re.match(r"^( *)([\w.-]+):(.*)$", line)
        if not m:
            continue
        depth = len(m.group(1)) // 2
        path = path[:depth] + [m.group(2)]
        if doc:
            rows.append((".".join(path), "", " ".join(doc)))
            doc = []
    values = yaml.safe_load(text)
    out = []
    for key, _, description in rows:
        value = values
        for part in key.split("."):
            value = value[part]
        default = json.dumps(value, separators=(", ", ": "))
        out.append((key, default, description))
    return out


def readme(current: str) -> str:
    """README.md with its values table rewritten."""
    rows = values_rows((CHART / "values.yaml").read_text())
    table = ["| key | default | description |", "| --- | --- | --- |"]
    for key, default, description in rows:
        cell = default.replace("|", "\\|")
        table.append(f"| `{key}` | `{cell}` | {description.replace('|', chr(92) + '|')} |")
    start, end = current.index(BEGIN) + len(BEGIN), current.index(END)
    return current[:start] + "\n" + "\n".join(table) + "\n" + current[end:]


def expected() -> dict[Path, str]:
    """Every generated file -> what it should hold."""
    out = {MANIFESTS / "components" / "prometheus-operator" / "prometheusrule.yaml": prometheus_rule()}
    out.update({CHART / "files" / name: text for name, text in chart_files().items()})
    out[CHART / "README.md"] = readme((CHART / "README.md").read_text())
    return out


def main() -> None:
    for path, text in expected().items():
        path.write_text(text)


if __name__ == "__main__":
    main()
