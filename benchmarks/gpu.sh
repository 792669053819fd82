#!/usr/bin/env bash
# The speed workloads of benchmarks.speed on one GPU (our code with --device cuda; each workload a fresh
# process, timed whole), under 10 minutes in all: the two tabular experiments and MNIST at full size, the
# token-reversal smoke and terminal reward H = 5. Prints the figures beside the reference's recorded times.
#   bash benchmarks/gpu.sh [DEVICE]          # default cuda
set -euo pipefail
cd "$(dirname "$0")/.."
DEVICE=${1:-cuda}
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
timeout 570 python -m benchmarks.speed tabular_multi_full tabular_single_full token_reversal_smoke \
    terminal_h5 mnist_full --device "$DEVICE" --n-jobs 2
