# A stand-in for postgres:16 where Docker Hub cannot be reached (`make images`): Debian 12's
# PostgreSQL 15 with the official image's contract that compose.yaml relies on (postgres-
# entrypoint.sh): POSTGRES_USER / POSTGRES_PASSWORD / POSTGRES_DB on a new data volume, the
# scripts of /docker-entrypoint-initdb.d run once, then the server on every interface of the
# container network with password authentication; `pg_isready` for the health check.
ARG BOOKWORM_IMAGE=rulerag-base/bookworm:12
FROM ${BOOKWORM_IMAGE}

# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends postgresql-15 \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /docker-entrypoint-initdb.d /var/lib/postgresql/data /var/run/postgresql \
    && chown -R postgres:postgres /var/lib/postgresql /var/run/postgresql

COPY postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint.sh
ENV PATH=/usr/lib/postgresql/15/bin:$PATH \
    PGDATA=/var/lib/postgresql/data
EXPOSE 5432
# the package's own system user (its id is Debian's to choose, not fixed)
# hadolint ignore=DL3066
USER postgres
ENTRYPOINT ["/usr/local/bin/postgres-entrypoint.sh"]
