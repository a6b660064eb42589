# syntax=docker/dockerfile:1
# The extender image: a venv with the runtime dependencies pinned by constraints.txt
# (no test extras), run as uid 10001. The wheels come from build/wheels, made on the
# build host by `make image` (`pip wheel -c constraints.txt .`), so the image build
# itself needs no network and installs exactly the pinned versions. BASE_IMAGE needs
# python3 3.11 with venv (the wheels are cp311); `make image` builds a local Debian
# bookworm base (debootstrap + podman import), since no image registry may be reachable.
ARG BASE_IMAGE=docker.io/library/python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS build
COPY build/wheels /wheels
RUN python3 -m venv /opt/extender \
 && /opt/extender/bin/pip install --no-cache-dir --no-index --find-links /wheels scheduling-extender

FROM ${BASE_IMAGE}
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="scheduling-extender" \
      org.opencontainers.image.description="kube-scheduler extender: Gt/Lt, Semver and CEL tolerations, taint-aware topology spread" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="${BASE_IMAGE}"
RUN (getent group extender || groupadd --gid 10001 extender) \
 && (getent passwd extender || useradd --uid 10001 --gid 10001 --no-create-home \
      --home-dir /nonexistent --shell /usr/sbin/nologin extender)
COPY --from=build /opt/extender /opt/extender
# No bundled example in a container: without --in-cluster, --kubeconfig or --cluster,
# `serve` logs "no cluster state configured" and /readyz stays 503.
ENV PATH=/opt/extender/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PROMETHEUS_MULTIPROC_DIR=/tmp/extender-metrics
USER 10001:10001
EXPOSE 8888 8889 9443
ENTRYPOINT ["extender"]
CMD ["serve"]
