# Source on the GPU machine from the repo root: the carried wheels (.whl) into /tmp/site once,
# then the environment every benchmark here expects (nothing is downloaded; NVLink multicast off).
# Bytecode is compiled once, as pip does on a user's machine, so that every fresh process (each
# xdist worker, each gated run) imports what a user's would.
if [ -d .whl ] && [ ! -f /tmp/site/.ditar-wheels ]; then
  python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && python3 -m compileall -q -j 0 /tmp/site >/dev/null && touch /tmp/site/.ditar-wheels || return 1
fi
export PYTHONPATH=/tmp/site:$PWD DITAR_CACHE=${DITAR_CACHE:-/tmp/ditar-cache} PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
