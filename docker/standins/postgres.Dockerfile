# Local stand-in for the official `postgres` image (no registry is reachable on the project's CI
# machines): Debian's PostgreSQL 15 on the stand-in Python base, with the official image's
# interface that docker/compose.yaml uses -- POSTGRES_USER / POSTGRES_PASSWORD / POSTGRES_DB,
# data in /var/lib/postgresql/data, port 5432, SIGTERM = smart shutdown.
ARG BASE_IMAGE=localhost/connect-standin-python:3.11-bookworm
FROM ${BASE_IMAGE}
# The official image's postgres user and group: 999 (the chart's bundled PostgreSQL runs as 999).
# Package versions come from the base's Debian release; pinning them breaks on every security update.
# hadolint ignore=DL3008
RUN groupadd --system --gid 999 postgres \
 && useradd --system --uid 999 --gid 999 --home-dir /var/lib/postgresql --shell /bin/bash postgres \
 && apt-get update \
 && apt-get install -y --no-install-recommends postgresql-15 \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/* \
 && install -d -o postgres -g postgres -m 0700 /var/lib/postgresql/data \
 && install -d -o postgres -g postgres -m 2775 /var/run/postgresql
COPY postgres-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
ENV PATH=/usr/lib/postgresql/15/bin:$PATH PGDATA=/var/lib/postgresql/data
USER 999:999
EXPOSE 5432
ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]
CMD ["postgres"]
