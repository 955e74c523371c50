#!/bin/sh
# mutants.sh: deliberate breakages the suite must catch (see mutants.py).
exec python3 "$(dirname "$0")/mutants.py" "$@"
