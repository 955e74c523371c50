#!/usr/bin/env bash
# Banned in lib/ (STYLE.md 2): raw allocation calls, rand, wall-clock time
# for durations, unbounded string functions. alloc.c owns the allocator.
set -euo pipefail
dir=$1
bad=0
pattern='(^|[^_a-z])(malloc|calloc|realloc|free|strdup|strndup|rand|srand|time|gettimeofday|sprintf|strcpy|strcat)\(|CLOCK_REALTIME|[^_]assert\('
while IFS= read -r f; do
  [ "$(basename "$f")" = alloc.c ] && continue
  # Strip comments and string literals, then look.
  if sed -e 's://.*$::' -e 's:/\*.*\*/::g' -e 's/"[^"]*"//g' "$f" \
      | grep -nE "$pattern"; then
    echo "banned function in $f" >&2
    bad=1
  fi
done < <(find "$dir" -name '*.c' -o -name '*.h')
exit $bad
