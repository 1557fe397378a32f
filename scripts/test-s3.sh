#!/usr/bin/env bash
# The remote snapshot tests against a real S3-compatible server: MinIO on
# loopback (scripts/minio.sh). See scripts/test-remote.sh.
exec "$(dirname "$0")/test-remote.sh" s3
