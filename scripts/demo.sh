#!/usr/bin/env bash
# Demo: generate a small C project, build it with `make -j2` inside atoll's
# in-memory file system, run the result, and show what the servers did.
set -euo pipefail
cd "$(dirname "$0")/.."
atoll=${ATOLL:-target/release/atoll}
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
for i in $(seq 1 16); do printf 'int part%d(void) { return %d; }\n' "$i" "$i" > "$src/part$i.c"; done
{
  for i in $(seq 1 16); do echo "int part$i(void);"; done
  echo '#include <stdio.h>'
  echo 'int main(void) { int s = 0;'
  for i in $(seq 1 16); do echo "  s += part$i();"; done
  echo '  printf("built inside atoll: sum of parts = %d\n", s); return 0; }'
} > "$src/main.c"
printf 'OBJS := $(patsubst %%.c,%%.o,$(wildcard *.c))\ndemo: $(OBJS)\n\t$(CC) -o $@ $^\n' > "$src/Makefile"

echo "\$ atoll run --stats --import $src:/atoll/demo -- bash -c 'cd /atoll/demo && make -j2 && ./demo'"
"$atoll" run --stats --import "$src:/atoll/demo" -- bash -c '
  cd /atoll/demo
  make -s -j2
  ./demo
  echo "inside atoll: $(ls | wc -l) files in /atoll/demo"
'
if [ -e /atoll ]; then
  echo "unexpected: /atoll exists on the host"
else
  echo "on the host, /atoll does not exist: those files lived in atoll's servers and buffer cache"
fi
