#!/usr/bin/env bash
# The GPU checks of the open speed and soundness work, in one run of about
# eight minutes on one H100 (issue 50: precision, compile, packed passes;
# issue 49: the grid on the device). Prints everything; with $OUT set (the
# device tool's output folder) also writes one log per step there.
#
#     bash benchmarks/gpu_checks.sh
set -u
cd "$(dirname "$0")/.."
out=${OUT:-}
step() {  # step NAME SECONDS COMMAND...: run it with a time limit, logged
    local name=$1 limit=$2
    shift 2
    echo "=== $name ($(date -u +%H:%M:%S))"
    if [ -n "$out" ]; then
        timeout "$limit" "$@" 2>&1 | tee "$out/$name.log"
    else
        timeout "$limit" "$@" 2>&1
    fi
}
nvidia-smi -L
python -c "import torch; print(torch.__version__, torch.cuda.get_device_name())"
# every test that needs a GPU (they skip without one)
step cuda-tests 150 python -m pytest -q -p no:cacheprovider \
    tests/test_precision.py tests/test_grid.py tests/test_noise.py \
    tests/test_smoothed_classifier.py tests/test_certify.py \
    tests/test_pass_sharing.py -k "cuda or device or gpu"
# ResNet-20 and ResNet-110, n = 100,000: fp32 against bf16 against bf16 +
# compile, beside the 3.7 s per image anchor for ResNet-110
cd benchmarks
step precision-speed 240 python bench_precision.py --device cuda --n 100000 \
    --inputs 4 --models resnet20,resnet110 --modes fp32,bf16,bf16+compile
# a bf16 and an fp32 network that agree on clean inputs: their certificates
step precision-quality 90 python bench_precision.py --device cuda --models "" \
    --quality mnist --quality-n 10000 --quality-inputs 200 --epochs 5
# packed passes at a GPU's batch size under the sequential decision
step batch-fill 120 python bench_batch_fill.py --device cuda --inputs 128 \
    --batch-size 10000 --settings radius
