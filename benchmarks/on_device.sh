#!/usr/bin/env bash
# Figures and checks on a lent GPU machine (16 idle cores: also the quietest CPU there is). Prepare here
# with `bash ../shared/gpu/prepare.sh`, send `.gpu` along (the `run` tool's carry), then from the project
# root there:
#   bash benchmarks/on_device.sh [STAGE ...]     # default: every stage; writes $OUT/STAGE.txt
# Stages: paired_cpu whole_cpu (issue 22's overhead on a quiet CPU), cuda (overhead + host-device syncs on
# the GPU, plus the default without NaNGuard), nan_guard (NaNGuard's GPU check alone: the verdict ring
# against the check it replaced), gpu_tests (pytest -m gpu), gpu_recipe (configs/mnist_gpu.yaml over 5
# seeds), and issue 42's: graph_recipe (configs/mnist_gpu_graph.yaml, whole-step capture, over 5 seeds),
# resnet (benchmarks/resnet_gpu.py: naive, hand-tuned, lit_gpu), warmup (a first and a second process of
# each MNIST GPU recipe), graph_overhead (the step path with --speed.cuda_graph against a raw loop); and
# issue 52's, in one process (benchmarks/gpu_stages.py: `import lightning` once): issue52 (the glue profile of
# lit_gpu's eager step, ResNet-50 at 224 px against the chip's peak, ResNet-18 against the hand-written
# whole-step graph and torch.compile(max-autotune)); its files are $OUT/issue52/{glue,resnet50,resnet18}.txt;
# issue59 (`bash benchmarks/on_device.sh gpu_tests issue59`): the ResNet-50 and ResNet-18 stages alone, more
# rounds, no compile ($OUT/issue59/{resnet50,resnet18}.txt).
# Each has its own time limit, so a slow one leaves the others' figures.
set -uo pipefail
out=${OUT:-device_out}
mkdir -p "$out"
bash .gpu/setup.sh || exit 1
export PATH=/tmp/venv/bin:$PATH
{ nproc; lscpu | grep -E "Model name"; cat /proc/loadavg; nvidia-smi -L; df -h /dev/shm; } | tee "$out/machine.txt"
stage() {
  name=$1 limit=$2; shift 2
  case " ${stages} " in *" $name "*) ;; *) return 0 ;; esac
  echo "== $name: $*"; timeout "$limit" "$@" 2>&1 | tee "$out/$name.txt"
}
stages=${*:-paired_cpu whole_cpu nan_guard cuda gpu_tests gpu_recipe graph_recipe resnet warmup graph_overhead issue52 issue59}
stage gpu_tests 170 python -m pytest -o addopts="" -m gpu -q -p no:cacheprovider
stage nan_guard 60 python benchmarks/nan_guard_gpu.py
stage cuda 150 python benchmarks/overhead.py --device cuda --steps 300 --repeats 5 --components nan_guard
stage paired_cpu 210 python benchmarks/overhead.py --paired --steps 300 --repeats 5 --threads 1 --components none
stage whole_cpu 150 python benchmarks/overhead.py --steps 300 --repeats 5 --threads 1 --components none
stage gpu_recipe 180 python benchmarks/mnist_fast_seeds.py --device cuda --config configs/mnist_gpu.yaml \
  --warmup-fits 1 --data-dir .gpu/data --seeds 0 1 2 3 4
stage graph_recipe 150 python benchmarks/mnist_fast_seeds.py --device cuda --config configs/mnist_gpu_graph.yaml \
  --warmup-fits 1 --data-dir .gpu/data --seeds 0 1 2 3 4
stage resnet 260 python benchmarks/resnet_gpu.py --steps 150 --warmup 30 --repeats 2 --workers 6
stage warmup 240 python benchmarks/warmup.py --config configs/mnist_gpu_graph.yaml configs/mnist_gpu.yaml \
  --data-dir .gpu/data
stage graph_overhead 150 python benchmarks/overhead.py --device cuda --steps 300 --repeats 3 --components none \
  --lit-flags "--speed.cuda_graph true"
stage issue52 480 python benchmarks/gpu_stages.py --out "$out/issue52" --budget-s 300
stage issue59 420 python benchmarks/gpu_stages.py --out "$out/issue59" --stages resnet50 resnet18 --budget-s 240
cat /proc/loadavg | tee "$out/load_end.txt"
