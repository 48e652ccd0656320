#!/usr/bin/env bash
# s3_moto.sh - s3_basic.sh and s3_concurrent.sh again against moto, a
# second, independent S3 implementation (started by each test, always:
# a shared server named by DCR_S3_DIR is radosgw).
set -u
dir=$(cd "$(dirname "$0")" && pwd)
unset DCR_S3_DIR
export DCR_S3_KIND=moto
rc=0
bash "$dir/s3_basic.sh" || rc=$?
[ "$rc" = 0 ] || exit "$rc"
bash "$dir/s3_concurrent.sh"
