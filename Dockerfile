# syntax=docker/dockerfile:1
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY extender ./extender
COPY examples ./examples
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
RUN useradd --system --uid 10001 extender
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
USER 10001
EXPOSE 8888
ENV PROMETHEUS_MULTIPROC_DIR=/tmp/extender-metrics
ENTRYPOINT ["extender"]
CMD ["serve"]
