# groupwire broker image.
#   docker build -t groupwire .
#   docker run -p 9092:9092 -p 9100:9100 -v groupwire-data:/data groupwire
# Stage 1 builds the wheel from the sources only; stage 2 installs that wheel and its
# runtime dependencies, nothing else (no compiler, no sources, no tests). The base image
# is pinned to an exact Python release (both stages: the wheel is pure Python, but one
# interpreter builds and runs it); bump it deliberately.

FROM python:3.11.11-slim AS builder

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY groupwire ./groupwire
COPY protocol ./protocol
COPY broker ./broker
COPY client ./client
COPY pipeline ./pipeline
COPY cli ./cli
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .


FROM python:3.11.11-slim

LABEL org.opencontainers.image.title="groupwire" \
      org.opencontainers.image.description="Consumer-group broker with Kafka's group semantics" \
      org.opencontainers.image.version="0.1.0"

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    GROUPWIRE_DATA_DIR=/data

RUN groupadd --system --gid 10001 groupwire \
    && useradd --system --uid 10001 --gid groupwire --home-dir /data --no-create-home \
       --shell /usr/sbin/nologin groupwire \
    && mkdir -p /data \
    && chown groupwire:groupwire /data

COPY --from=builder /wheels /tmp/wheels
RUN pip install --no-cache-dir /tmp/wheels/groupwire-*.whl \
    && rm -rf /tmp/wheels

USER 10001:10001
WORKDIR /data
VOLUME ["/data"]
EXPOSE 9092 9100

# `|| exit 1`: Docker reserves exit code 2, which argparse uses for a usage error.
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["sh", "-c", "groupwire health --bootstrap 127.0.0.1:9092 --timeout-ms 2000 || exit 1"]

STOPSIGNAL SIGTERM
ENTRYPOINT ["groupwire"]
CMD ["broker", "--host", "0.0.0.0", "--port", "9092", "--data-dir", "/data", "--metrics-port", "9100"]
