"""One version: pyproject.toml's. Every other file that states the release's version
says the same (the plugin's distribution and package, the server's package, the chart's
version and appVersion, the Dockerfile's default label, the overlays' image tags, the
OpenAPI document), and the image build passes it as --build-arg VERSION. A bump is
`make release`'s precondition: it refuses a VERSION other than pyproject.toml's."""

from __future__ import annotations

import re

import yaml
from deploy_tools import ROOT

VERSION = re.search(r'^version = "(.*)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)


def stated() -> dict[str, str]:
    """Where the version is written -> what it says there."""
    def line(path: str, pattern: str) -> str:
        return re.search(pattern, (ROOT / path).read_text(), re.M).group(1)

    chart = yaml.safe_load((ROOT / "charts/scheduling-extender/Chart.yaml").read_text())
    out = {
        "plugin/pyproject.toml": line("plugin/pyproject.toml", r'^version = "(.*)"'),
        "plugin/kubectl_extender/__init__.py": line("plugin/kubectl_extender/__init__.py", r'^__version__ = "(.*)"'),
        "extender/__init__.py": line("extender/__init__.py", r'^__version__ = "(.*)"'),
        "charts/scheduling-extender/Chart.yaml: version": chart["version"],
        "charts/scheduling-extender/Chart.yaml: appVersion": chart["appVersion"],
        "Dockerfile: ARG VERSION": line("Dockerfile", r"^ARG VERSION=(.*)$"),
        "docs/reference/openapi.yaml": yaml.safe_load((ROOT / "docs/reference/openapi.yaml").read_text())["info"]["version"],
    }
    for kustomization in sorted((ROOT / "manifests").rglob("kustomization.yaml")):
        for image in yaml.safe_load(kustomization.read_text()).get("images", []):
            if "scheduling-extender" in image.get("newName", image["name"]):
                out[f"{kustomization.relative_to(ROOT)}: {image['name']}"] = image["newTag"]
    return out


def test_every_file_states_pyprojects_version():
    found = stated()
    assert len(found) >= 10
    assert {where: v for where, v in found.items() if v != VERSION} == {}


def test_the_image_build_passes_the_version():
    build = (ROOT / ".ci" / "build-image").read_text()
    assert '--build-arg VERSION="$VERSION"' in build
    assert re.search(r"^VERSION=\$\(sed -n .*pyproject\.toml\)", build, re.M)
    assert 'org.opencontainers.image.version="${VERSION}"' in (ROOT / "Dockerfile").read_text()


def test_the_chart_is_packaged_with_the_version():
    release = (ROOT / ".ci" / "release").read_text()
    assert '--version "$VERSION" --app-version "$VERSION"' in release
    values = yaml.safe_load((ROOT / "charts/scheduling-extender/values.yaml").read_text())
    assert values["image"]["tag"] == "", "the image's tag follows appVersion"
