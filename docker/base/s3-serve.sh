#!/bin/sh
# `rclone serve s3` over /data with the access key and secret of MinIO's variables, so that
# compose.yaml's MINIO_ROOT_USER / MINIO_ROOT_PASSWORD (the DVC remote's AWS_* keys) hold; the
# key reaches rclone through its environment (RCLONE_AUTH_KEY), not its command line, which
# `ps` shows. The buckets named in S3_BUCKETS are made first (top-level folders).
set -eu
if [ -z "${MINIO_ROOT_PASSWORD:-}" ]; then
  echo "s3-serve: set MINIO_ROOT_PASSWORD" >&2
  exit 1
fi
for bucket in ${S3_BUCKETS:-}; do
  mkdir -p "/data/$bucket"
done
# a list flag's variable is read as CSV: the pair is quoted to stay one entry
RCLONE_AUTH_KEY="\"${MINIO_ROOT_USER:-rulerag},${MINIO_ROOT_PASSWORD}\""
export RCLONE_AUTH_KEY
exec rclone serve s3 /data --addr :9000 --vfs-cache-mode off "$@"
