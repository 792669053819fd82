#!/usr/bin/env bash
# The paper's transformer tables at full size on one GPU, in priority order: Table 1, Table 3 (H = 10
# prompt-matched first), Table 2, Table 5, Section 3.7, Section 4. Resumable: every finished seed is a
# file under results/paper/ and is never rerun, so stop the script at any time and start it again.
#   bash experiments/gpu.sh                  # JOBS runs side by side on one device, MEMBERS seeds per model
#   JOBS=6 MEMBERS=10 DEVICE=cuda:1 bash experiments/gpu.sh
#   DRY_RUN=1 DEVICE=cpu bash experiments/gpu.sh   # list the jobs only
set -euo pipefail
cd "$(dirname "$0")/.."
DEVICE=${DEVICE:-cuda}
JOBS=${JOBS:-4}
MEMBERS=${MEMBERS:-5}
run() {
    python -m experiments.run "$@" --device "$DEVICE" --n-jobs "$JOBS" --members-per-process "$MEMBERS" \
        ${DRY_RUN:+--dry-run}
}
run vocab_sweep                                  # Table 1: V = 2, 4, 8, 16 x 4 methods x 20 seeds x 1,000
run terminal --variants prompts/H10              # Table 3, H = 10 prompt-matched: 20 seeds x 2,000
run terminal                                     # the rest of Table 3 (H = 7..9, interaction-matched)
run variations                                   # Table 2
run eta_sweep                                    # Table 5
run ablations                                    # Section 3.7
for experiment in k_sweep epoch_sweep masking diagnostics; do  # Section 4
    run "$experiment"
done
