# stockade admission webhook image: `docker build -t stockade .`, then `docker run stockade serve /policies`.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README* ./
COPY stockade ./stockade
RUN pip install --no-cache-dir --prefix=/install ".[server]"

FROM python:3.11-slim
COPY --from=build /install /usr/local
# numeric non-root user so runAsNonRoot can be verified by the kubelet
USER 65532:65532
EXPOSE 9443 8000
ENTRYPOINT ["stockade"]
CMD ["serve", "--help"]
