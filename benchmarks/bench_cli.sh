#!/usr/bin/env bash
# Wall time of `dpcalib --help` and of a tight DIFF2-GD calibration (best of 5 each).
# Usage: bash benchmarks/bench_cli.sh   (needs the package installed: pip install -e .)
set -euo pipefail
best() {
  local best=999
  for _ in 1 2 3 4 5; do
    local s e
    s=$(date +%s.%N); "$@" > /dev/null; e=$(date +%s.%N)
    best=$(python3 -c "print(min($best, $e - $s))")
  done
  printf '%.3f s  %s\n' "$best" "$*"
}
best python3 -m dpcalib --help
best python3 -m dpcalib calibrate diff2-gd --epsilon 3 --delta 1e-5 --rounds 2000 --restart-interval 20 --clients 10 --n-min 1651 --u 1.25
best python3 -m dpcalib calibrate diff2-gd --epsilon 3 --delta 1e-5 --rounds 2000 --restart-interval 20 --clients 10 --n-min 1651 --u 1.25 --method paper --json
best python3 -m dpcalib calibrate dp-sgd --epsilon 3 --delta 1e-5 --sampling-rate 0.01 --steps 1000 --method tight
