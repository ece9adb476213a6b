# gpu-exporter container image.
#
# Slim Debian with Debian's own python3, so that bcc (python3-bpfcc, which is not on PyPI)
# is importable and the eBPF collector works when the container is given the privileges.
# Runs as an unprivileged user by default: NVML and sysfs need no root.
#
#   docker build -t gpu-exporter .
#   docker run -d --gpus all -p 9445:9445 gpu-exporter
#
# See docs/deploy.md, "Docker", for the eBPF run line.
FROM debian:bookworm-slim

ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="gpu-exporter" \
      org.opencontainers.image.description="Prometheus exporter for GPU fleets: NVIDIA (NVML), AMD and Intel (sysfs), CUDA activity (eBPF)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="docker.io/library/debian:bookworm-slim"

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv python3-bpfcc \
 && rm -rf /var/lib/apt/lists/*

ENV VIRTUAL_ENV=/opt/gpu-exporter

WORKDIR /build
COPY pyproject.toml README.md ./
COPY gpu_exporter/ gpu_exporter/
# --system-site-packages: the venv sees Debian's bcc. The last two commands prove, at build
# time, that the exporter runs and that bcc imports.
RUN python3 -m venv --system-site-packages "$VIRTUAL_ENV" \
 && "$VIRTUAL_ENV/bin/pip" install --no-cache-dir --disable-pip-version-check --quiet . \
 && "$VIRTUAL_ENV/bin/gpu-exporter" --version \
 && "$VIRTUAL_ENV/bin/python" -c "import bcc, gpu_exporter.commands.healthcheck"

WORKDIR /
RUN rm -rf /build \
 && groupadd --system --gid 10001 gpu-exporter \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin gpu-exporter

# NVIDIA container toolkit: the exporter only needs NVML (the "utility" capability).
ENV PATH="/opt/gpu-exporter/bin:${PATH}" \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=utility \
    GPU_EXPORTER_WEB_LISTEN_ADDRESS=:9445

EXPOSE 9445
USER 10001:10001

# Follows the exporter onto TLS when --web.config.file turns it on; /healthz needs no
# password.
HEALTHCHECK --interval=30s --timeout=10s --start-period=15s --retries=3 \
  CMD ["python3", "-m", "gpu_exporter.commands.healthcheck"]

ENTRYPOINT ["gpu-exporter"]
