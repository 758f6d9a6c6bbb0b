# A stand-in for python:3.11-slim-bookworm where Docker Hub cannot be reached, built by
# `make images` (docker/images.py) on the local bookworm root file system (mmdebstrap): Debian
# 12's own Python 3.11 in a virtual environment at /opt/python, first on PATH, so `python` and
# `pip` are what the official image's are (a venv: Debian's system Python refuses pip installs,
# PEP 668). The CA certificates the build machine added (/usr/local/share/ca-certificates, e.g.
# a TLS-inspecting proxy's) came with the root file system; pip is pointed at the system bundle.
ARG BOOKWORM_IMAGE=rulerag-base/bookworm:12
FROM ${BOOKWORM_IMAGE}

# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/python

ENV PATH=/opt/python/bin:$PATH \
    LANG=C.UTF-8 \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt

CMD ["python3"]
