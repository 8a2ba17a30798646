# Local stand-in for the official `prom/prometheus` image (no registry is reachable on the project's
# CI machines): Debian's Prometheus on the stand-in Python base, with the official image's
# interface -- /bin/prometheus, config in /etc/prometheus/prometheus.yml, data in /prometheus, 9090.
ARG BASE_IMAGE=localhost/connect-standin-python:3.11-bookworm
FROM ${BASE_IMAGE}
# Package versions come from the base's Debian release; pinning them breaks on every security update.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends prometheus \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/* \
 && install -d -o nobody -g nogroup /prometheus
USER 65534:65534
EXPOSE 9090
WORKDIR /prometheus
ENTRYPOINT ["/usr/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus", "--web.listen-address=:9090"]
