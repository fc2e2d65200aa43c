#!/bin/bash
# A seed replays exactly in another process: the simulator's promise, which a failure's replay
# command relies on. Runs the same quick seeds in three processes (each with its own address
# layout, so anything seeded from an address differs) and compares everything they print:
# counts per run and the coverage table. Anything seeded per process (a hash seed chosen at
# start, say) would make a seed run differently from one process to the next.
set -euo pipefail
sim="$1"
runs=()
# Not the lines that carry wall-clock time: the last line's, and the progress lines, which come
# every 10 s and so appear in a run that a loaded machine slowed and not in the next.
for i in 1 2 3; do
  # Progress and timing lines (seeds/s) depend on the machine's speed, not on the seeds.
  runs+=("$("$sim" --seeds=200 --first=201 --quick 2>&1 | grep -v 'seeds/s')")
done
if [[ "${runs[0]}" != "${runs[1]}" || "${runs[0]}" != "${runs[2]}" ]]; then
  echo "the same seeds ran differently in three processes:"
  diff <(echo "${runs[0]}") <(echo "${runs[1]}") || true
  diff <(echo "${runs[0]}") <(echo "${runs[2]}") || true
  exit 1
fi
echo "seeds 201-400: the same in three processes"
