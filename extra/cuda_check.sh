#!/usr/bin/env bash
# The checks to run on a machine with an NVIDIA GPU, in one go: the CUDA cases of the test suite (the
# op, nn, jit and BEAM tests take every device present), the digits demo trained on CUDA, the model
# benchmark against torch on the same GPU, and BEAM on CUDA kernels. Needs python3 with numpy, cupy,
# pytest, pytest-xdist and hypothesis (torch and scikit-learn for the demo and the benchmarks); runs
# from the checkout, not installed. Logs go to $OUT (default: ./cuda_check_out), a summary to stdout.
#
#     bash extra/cuda_check.sh            # the suite gets at most 270 s, each benchmark 90 s
#     SUITE_SECONDS=600 bash extra/cuda_check.sh
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${OUT:-cuda_check_out}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD LAZYGRAD_CACHE=${LAZYGRAD_CACHE:-/tmp/lazygrad_cuda_cache}
# the MPI tests' mpiexec may be Open MPI's, which refuses to start as root (as a GPU machine's commands may run)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
suite_seconds=${SUITE_SECONDS:-270}
bench_seconds=${BENCH_SECONDS:-90}

{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c "import cupy, numpy; print('cupy', cupy.__version__, 'numpy', numpy.__version__)"
  gcc --version | head -1
  echo "cores: $(nproc)"
  python3 -m lazygrad.devices
} >"$out/env.txt" 2>&1
cat "$out/env.txt"

# the digits demo on CUDA beside the suite (a check of training, not a timing)
(time timeout -s INT -k 10 "$suite_seconds" python3 extra/train_digits.py --device CUDA --epochs 3 \
  --min-accuracy 0.9 --out /tmp/cuda_check_digits) >"$out/digits.log" 2>&1 &
digits=$!

# SIGINT first, so pytest still prints its summary when the time is up
timeout -s INT -k 20 "$suite_seconds" python3 -m pytest -q -p no:cacheprovider -n "$(nproc)" -k CUDA test \
  -rfE --tb=short --durations=10 --junitxml="$out/junit.xml" >"$out/suite.log" 2>&1
echo "suite: exit $?"
grep -E "^(FAILED|ERROR) " "$out/suite.log" | cut -c1-220 | head -60
tail -n 3 "$out/suite.log"

wait $digits
echo "digits: exit $?"
tail -n 8 "$out/digits.log"

timeout -s INT -k 10 "$bench_seconds" python3 extra/bench/bench_cuda_models.py --repeats 20 --kernels 5 >"$out/models.log" 2>&1
echo "models: exit $?"
tail -n 30 "$out/models.log"

DEV=CUDA timeout -s INT -k 10 "$bench_seconds" python3 extra/bench/bench_kernels.py --only matmul,softmax,conv2d \
  --matmul 2048 --beam 2 --repeats 5 >"$out/beam.log" 2>&1
echo "beam: exit $?"
tail -n 20 "$out/beam.log"
