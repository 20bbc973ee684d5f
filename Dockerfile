# stockade image: `docker build -t stockade .`; the Helm chart (deploy/helm/stockade) runs
# `stockade serve /policies --from-cluster --register-webhooks ...` and `stockade cleanup` from it.
# Built for the chart's pod security settings: numeric non-root user, read-only root filesystem (only /tmp and
# the certificate directory are writable volumes), no bytecode written at run time.
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY stockade ./stockade
# a venv at a fixed path copies cleanly into the runtime stage (same base image, same interpreter path)
RUN python -m venv /opt/stockade \
 && /opt/stockade/bin/pip install ".[server]" \
 && /opt/stockade/bin/python -m compileall -q /opt/stockade

FROM python:3.11-slim
LABEL org.opencontainers.image.title="stockade" \
      org.opencontainers.image.description="Kyverno-compatible policy engine and admission webhook"
COPY --from=build /opt/stockade /opt/stockade
# git: `stockade images controller` commits ImageUpdateAutomation changes with the git CLI (ssh for ssh://, gpg signs commits)
RUN apt-get update && apt-get install -y --no-install-recommends git ca-certificates openssh-client gnupg \
 && rm -rf /var/lib/apt/lists/*
ENV PATH=/opt/stockade/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# numeric so the kubelet can verify runAsNonRoot
USER 65532:65532
EXPOSE 9443 8000
ENTRYPOINT ["stockade"]
CMD ["serve", "--help"]
