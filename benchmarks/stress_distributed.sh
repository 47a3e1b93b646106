#!/usr/bin/env bash
# Run the multi-process tests (tests/test_distributed.py: gloo on localhost, 2-4 processes each)
# N times in a row (default 30) and count the runs that failed.  A failure keeps its log.
#
#   bash benchmarks/stress_distributed.sh [N]
#
# Exit code 0 only if every run passed.
set -u
cd "$(dirname "$0")/.."
n=${1:-30}
fails=0
log_dir=$(mktemp -d)
start=$(date +%s)
for i in $(seq 1 "$n"); do
    if python -m pytest -q -p no:cacheprovider tests/test_distributed.py >"$log_dir/run$i.log" 2>&1; then
        echo "run $i/$n: $(tail -n 1 "$log_dir/run$i.log")"
        rm -f "$log_dir/run$i.log"
    else
        fails=$((fails + 1))
        echo "run $i/$n: FAILED ($(tail -n 1 "$log_dir/run$i.log")), log kept: $log_dir/run$i.log"
    fi
done
echo "$n runs of tests/test_distributed.py, $fails failed, $(( $(date +%s) - start )) s"
[ "$fails" -eq 0 ]
