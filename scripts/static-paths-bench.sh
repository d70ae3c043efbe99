#!/usr/bin/env bash
# Path calls of a static program (served by the relay's seccomp supervisor)
# against a dynamic one (the client library), and the cost of a static
# exec, under an OLD and a NEW atoll in turn, ROUNDS times
# (docs/BENCHMARKS.md, "Static programs naming paths").
#
#   scripts/static-paths-bench.sh OLD_ATOLL NEW_ATOLL [ROUNDS]
set -euo pipefail
old=$1 new=$2 rounds=${3:-5} n=20000
dir=$(mktemp -d)
cc -O2 -static -o "$dir/sbench" "$(dirname "$0")/static-paths-cost.c"
cc -O2 -o "$dir/dbench" "$(dirname "$0")/static-paths-cost.c"
for _ in $(seq 1 "$rounds"); do
  for which in old new; do
    bin=$old; [ $which = new ] && bin=$new
    "$bin" run --memory 256M --servers 2 -- bash -c '
      head -c 4000 /dev/zero > /atoll/f
      w='$which' d='$dir' n='$n'
      echo "$w host-stat-static $($d/sbench stat /etc/hostname $n)"
      echo "$w host-stat-dynamic $($d/dbench stat /etc/hostname $n)"
      echo "$w atoll-stat-dynamic $($d/dbench stat /atoll/f $n)"
      echo "$w atoll-open-dynamic $($d/dbench open /atoll/f $n)"
      # the old relay does not serve paths: the static program fails there
      echo "$w atoll-stat-static $($d/sbench stat /atoll/f $n 2>&1)"
      echo "$w atoll-open-static $($d/sbench open /atoll/f $n 2>&1)"
      s=$(date +%s%N); for _ in $(seq 200); do busybox true; done; e=$(date +%s%N)
      echo "$w busybox-true $(( (e - s) / 200000 )) us/op"
    '
  done
done
rm -rf "$dir"
