#!/bin/bash
# Peak memory of a 15-column NAPSU-MQ fit with the chains split over two processes
# (napsu_sampling.CHAIN_PROCESSES = 2): runs `bench/napsu_scale.py --widths --reps 1 --seed0 SEED` and
# samples /proc/<pid>/smaps_rollup of it and of its forked helpers every 0.5 s. The helper shares most
# of its pages with its parent after fork, so its resident set (the bench's peak_memory_helper_gb)
# overstates what it adds: its private pages (Private_Clean + Private_Dirty) are what it adds.
# Usage: bash bench/napsu_helper_memory.sh [SEED]   (prints one JSON object on its last line)
set -euo pipefail
cd "$(dirname "$0")/.."
seed="${1:-5}"
out="$(mktemp)"
.venv/bin/python bench/napsu_scale.py --widths --reps 1 --seed0 "$seed" > "$out" 2>/dev/null &
pid=$!
main_pss=0; helper_pss=0; helper_private=0
kb() { awk -v pat="$2" '$1 ~ pat {s += $2} END {print s + 0}' "/proc/$1/smaps_rollup" 2>/dev/null || echo 0; }
while kill -0 "$pid" 2>/dev/null; do
  v=$(kb "$pid" '^Pss:'); [ "$v" -gt "$main_pss" ] && main_pss=$v
  for c in $(ps --ppid "$pid" -o pid= 2>/dev/null || true); do
    v=$(kb "$c" '^Pss:'); [ "$v" -gt "$helper_pss" ] && helper_pss=$v
    v=$(kb "$c" '^Private_(Clean|Dirty):'); [ "$v" -gt "$helper_private" ] && helper_private=$v
  done
  sleep 0.5
done
wait "$pid"
tail -n 1 "$out" | .venv/bin/python -c '
import json, sys
seed, main_pss, helper_pss, helper_private = (int(v) for v in sys.argv[1:])
peak = json.loads(sys.stdin.read())["full_width"]["peak_memory_gb"]
gb = lambda kb: round(kb / 2 ** 20, 2)
print(json.dumps({"seed": seed, "peak_memory_gb": peak, "main_max_pss_gb": gb(main_pss),
                  "helper_max_pss_gb": gb(helper_pss), "helper_max_private_gb": gb(helper_private)}))
' "$seed" "$main_pss" "$helper_pss" "$helper_private"
rm -f "$out"
