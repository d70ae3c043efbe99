#!/usr/bin/env bash
# What each island costs (docs/BENCHMARKS.md, "Islands"): the same data
# workloads under `atoll run --island coherent|incoherent|copy`, in turn,
# ROUNDS times, milliseconds per workload.
#
#   scripts/islands-bench.sh [ROUNDS] [TARBALL]
#
# TARBALL (default: a tar of /usr/include made once under /tmp) is
# extracted in the mount; 256 MiB are written with dd, read with cat and
# sent through an atoll pipe; 2000 small headers are read with cat.
set -euo pipefail
rounds=${1:-5}
atoll=${ATOLL:-$(dirname "$0")/../target/release/atoll}
tarball=${2:-/tmp/atoll-islands-include.tar}
[ -e "$tarball" ] || tar cf "$tarball" -C /usr include
workload='
t() { local s=$(date +%s%N); "$@"; local e=$(date +%s%N); echo $(( (e - s) / 1000000 )); }
cd /atoll
w=$(t dd if=/dev/zero of=z bs=1M count=256 status=none)
r=$(t sh -c "cat z > /dev/null")
p=$(t sh -c "head -c 268435456 /dev/zero | cat > /dev/null")
x=$(t tar xf "$TARBALL")
c=$(t sh -c "cat \$(find include -name \"*.h\" | head -2000) > /dev/null")
echo "write_ms=$w read_ms=$r pipe_ms=$p extract_ms=$x readsmall_ms=$c"
'
for _ in $(seq 1 "$rounds"); do
    for island in coherent incoherent copy; do
        printf '%-10s ' "$island"
        TARBALL=$tarball "$atoll" run --servers 2 --island "$island" -- bash -c "$workload"
    done
done
