#!/usr/bin/env bash
# run-fuzz.sh SECONDS TARGET... -- runs each libFuzzer target for SECONDS from a
# scratch copy of its seed corpus (spec/fuzz/corpus/<name>/, <name> being the
# target's file name without _fuzz), FUZZ_JOBS at a time (default: the number
# of cores; each target is one process on one core), and prints one line per
# target, in the order given: executions, coverage (cov/ft) and the verdict. Any crash, leak,
# timeout or sanitizer report fails the run; its reproducer is kept under
# build/fuzz/work/<name>/ and named in the output.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
seconds=$1
shift
# FUZZ_SEED fixes libFuzzer's random seed, so that a run's inputs are the same
# sequence on every machine (make test sets it); unset, every run explores anew.
seed_opt=()
if [ -n "${FUZZ_SEED:-}" ]; then seed_opt=(-seed="$FUZZ_SEED"); fi
export ASAN_OPTIONS="abort_on_error=1:detect_leaks=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
jobs=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}

# fuzz_one BIN: fuzz one target; its verdict goes to build/fuzz/work/<name>/verdict,
# exit status 1 if it found anything.
fuzz_one() {
  local bin=$1 name work log rc execs covft
  name=$(basename "$bin")
  name=${name%_fuzz}
  work=build/fuzz/work/$name
  rm -rf "$work" && mkdir -p "$work/corpus"
  if [ -d "spec/fuzz/corpus/$name" ]; then cp -r "spec/fuzz/corpus/$name/." "$work/corpus/"; fi
  log=$work/log
  "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    -print_final_stats=1 "${seed_opt[@]}" -artifact_prefix="$work/" "$work/corpus" >"$log" 2>&1
  rc=$?
  execs=$(awk '/stat::number_of_executed_units/ { print $2 }' "$log" | tail -1)
  covft=$(grep -Eo 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1)
  if [ $rc -eq 0 ]; then
    echo "fuzz $name: ${execs:-?} executions, ${covft:-no coverage line}, ${seconds}s, no crash" >"$work/verdict"
    return 0
  fi
  { echo "fuzz $name: FAILED (exit $rc) after ${execs:-?} executions; see $log"
    grep -E "ERROR|SUMMARY|Test unit written" "$log" | head -5; } >"$work/verdict"
  return 1
}

running=0
for bin in "$@"; do
  if [ "$running" -ge "$jobs" ]; then wait -n; running=$((running - 1)); fi
  fuzz_one "$bin" &
  running=$((running + 1))
done
wait
status=0
for bin in "$@"; do
  name=$(basename "$bin")
  verdict=build/fuzz/work/${name%_fuzz}/verdict
  if [ -f "$verdict" ]; then cat "$verdict"; else echo "fuzz ${name%_fuzz}: FAILED (no verdict)"; fi
  grep -q ': FAILED' "$verdict" 2>/dev/null && status=1
  [ -f "$verdict" ] || status=1
done
exit $status
