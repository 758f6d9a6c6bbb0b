# A stand-in for redis:7.4 where Docker Hub cannot be reached (`make images`): Debian 12's
# redis-server (7.0), listening on every interface of the container network without protected
# mode, as the official image does; `redis-cli ping` answers the compose health check.
ARG BOOKWORM_IMAGE=rulerag-base/bookworm:12
FROM ${BOOKWORM_IMAGE}

# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends redis-server \
    && rm -rf /var/lib/apt/lists/*

EXPOSE 6379
# the package's own system user (its id is Debian's to choose, not fixed)
# hadolint ignore=DL3066
USER redis
CMD ["redis-server", "--bind", "0.0.0.0", "--protected-mode", "no", "--save", "", "--appendonly", "no"]
