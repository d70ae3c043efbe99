#!/usr/bin/env bash
# What a static program's exec of a program stored in the mount costs
# against the same program on the host: a static shell (busybox sh) runs a
# do-nothing C program 200 times, static and dynamic builds, host and mount
# copies alternated in each of ROUNDS rounds, under one instance
# (docs/BENCHMARKS.md, "Static programs naming paths").
#
#   scripts/static-exec-bench.sh ATOLL [ROUNDS]
set -euo pipefail
atoll=$1 rounds=${2:-7}
dir=$(mktemp -d)
echo 'int main(void) { return 0; }' > "$dir/nop.c"
cc -O2 -static -o "$dir/nop-static" "$dir/nop.c"
cc -O2 -o "$dir/nop-dynamic" "$dir/nop.c"
"$atoll" run --memory 256M --servers 2 -- bash -c '
  d='"$dir"' rounds='"$rounds"'
  mkdir -p /atoll/bin; cp "$d"/nop-static "$d"/nop-dynamic /atoll/bin/
  loop() {
    local s e
    s=$(date +%s%N)
    busybox sh -c "i=0; while [ \$i -lt 200 ]; do $1 || exit 1; i=\$((i+1)); done"
    e=$(date +%s%N)
    echo "$2 $(( (e - s) / 200000 ))"
  }
  for r in $(seq "$rounds"); do
    for kind in static dynamic; do
      loop "$d/nop-$kind" "host-$kind"
      loop "/atoll/bin/nop-$kind" "mount-$kind"
    done
  done
' | awk '{ v[$1] = v[$1] " " $2 } END { for (k in v) print k ":" v[k] " us/exec" }' | sort
rm -rf "$dir"
