# Source on the GPU machine from the repo root: the carried wheels (.whl) into /tmp/site once,
# then the environment every benchmark here expects (nothing is downloaded; NVLink multicast off).
# Bytecode is compiled once, as pip does on a user's machine, so that every fresh process (each
# xdist worker, each gated run) imports what a user's would.
# The wheels and this checkout reach Python through a .pth in the user's site-packages, not
# PYTHONPATH: `dit-ar experiment` passes no PYTHON* variable to the judge (loop.integrity.hermetic), so a
# PYTHONPATH install would vanish from every gated run.
if [ -d .whl ] && [ ! -f /tmp/site/.ditar-wheels ]; then
  python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && python3 -m compileall -q -j 0 /tmp/site >/dev/null && touch /tmp/site/.ditar-wheels || return 1
fi
unset PYTHONPATH
if ! python3 -c 'import diffusers, pytest_ditar' 2>/dev/null; then  # not a development venv (the CPU dry run's)
  # the user's site-packages, or (an image that disables it, as root) the interpreter's own
  usersite=$(python3 -c 'import site, sysconfig; print(site.getusersitepackages() if site.ENABLE_USER_SITE else sysconfig.get_paths()["purelib"])')
  [ -n "$usersite" ] || { echo "gpu_env: no site-packages for the .pth" >&2; return 1; }
  mkdir -p "$usersite" && printf '%s\n%s\n' "$PWD" /tmp/site > "$usersite/ditar-gpu.pth" || return 1
  python3 -c 'import diffusers, pytest_ditar' || { echo "gpu_env: diffusers or pytest_ditar not importable" >&2; return 1; }
fi
export DITAR_CACHE=${DITAR_CACHE:-/tmp/ditar-cache} PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
