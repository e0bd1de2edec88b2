# Sourced by the one-call device scripts of tools/gpu (roofline_run.sh,
# stack_run.sh, profile_step.sh): a fresh work folder, the time budget of
# the call, step stamps, and the staged RUN_DIR of worker/gpu/stage_gpu_run.sh
# unpacked with the environment its binaries need. The caller sets
#   R       the staged folder (relative or absolute)
#   W       a scratch folder (emptied here)
#   LOG     where the logs go ($OUT on the device)
#   BUDGET  seconds the whole call may take
# and gets
#   left, cap N   seconds left / a timeout of at most N seconds and at most
#                 what the budget leaves, less a 20 s reserve for the end
#   rc            an associative array of step exit codes
#   stamp MSG     "[t s] MSG" on stdout and in ${W}/steps.txt
#   B             the binaries' folder (absolute)
#   PY_ENV        env prefix that runs python3 with the machine's own
#                 libraries (the staged Debian ones are for the binaries)
#   M8            where the 16 GB Llama-3.1-8B-shape checkpoint goes:
#                 /dev/shm when it has 20 GB free, else /tmp
rm -rf "${W}"
mkdir -p "${LOG}" "${R}/lib" "${W}"
T0=${SECONDS}
left() { echo $((BUDGET - (SECONDS - T0))); }
cap() {
  local l=$(($(left) - 20))
  ((l < $1)) && echo $((l > 1 ? l : 1)) || echo "$1"
}
declare -A rc
stamp() { echo "[$((SECONDS - T0)) s] $*" | tee -a "${W}/steps.txt"; }

[[ -f "${R}/lib.tar.xz" ]] && tar -xJf "${R}/lib.tar.xz" -C "${R}/lib"
[[ -f "${R}/bin.tar.xz" ]] && tar -xJf "${R}/bin.tar.xz" -C "${R}"
PY_ENV=(env "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}")
RA="$(cd "${R}" && pwd)"
export LD_LIBRARY_PATH="${RA}/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export RADIXKV_SHARED_DIR="${RA}/shared"
B="${RA}/bin"
M8=/tmp/llama3-8b
shm_free=$(df -k --output=avail /dev/shm 2>/dev/null | tail -1)
[[ -n "${shm_free}" && "${shm_free}" -gt 20000000 ]] && M8=/dev/shm/llama3-8b
