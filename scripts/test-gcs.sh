#!/usr/bin/env bash
# The remote snapshot tests against a server speaking Google Cloud
# Storage's JSON API: fake-gcs-server on loopback (scripts/fake-gcs.sh),
# in binaries built with -tags gcs. See scripts/test-remote.sh.
exec "$(dirname "$0")/test-remote.sh" gcs
