#!/usr/bin/env bash
# The project's one device check: everything a task lent a real NVIDIA GPU runs, as it is, in one call under
# 9 minutes. Any task that is lent a device machine runs
#
#     bash benchmarks/device_check.sh
#
# with $OUT set by the device tool (a folder whose files come back; default: a fresh temporary folder). Each step
# has its own time limit, and a step that fails or runs out of time does not stop the steps after it:
#
#   install    pip install --no-deps --no-build-isolation -e .  (the machine has torch, torch-geometric,
#              nvidia-ml-py, psutil, filelock and click but reaches no package index; root helpers run
#              `python -I`, so the package must be installed, not only on PYTHONPATH)              <= 90 s
#   pytest     python -m pytest -m gpu -q: the NVML contract suite and every other gpu-marked test      <= 60 s
#   gpu_check  python benchmarks/gpu_check.py --budget-s 315: the cap sweep of the canned workloads, the power
#              of spinning kernels (a rank waiting in a collective) against idle and computing, first and
#              repeat launch against torchrun, SIGKILL of a root launcher mid-profile and the seconds until
#              the cap is back, launch overhead (its contract section is the pytest step above)     <= 345 s
#   calibrate  ecolaunch calibrate on GPU 0 into a fresh state directory: mm, mm@30 (the same work busy 30 % of
#              the time, like a job waiting on its data loader), bw and mlp, alone at <= 3 caps and in
#              pairs, with MPS where the driver has it: the measured truth of pairs on an underused GPU
#              (mm@30 first, so that the budget skips its pairs last)                                  <= 150 s
#
# What comes back under $OUT (the device tool returns at most 8 files):
#   summary.json                 each step: its command, exit status, seconds, status (pass/fail/timeout/skip)
#   device_check.log             every step's output, in order
#   gpu-<model>.json             gpu_check's document (commit as benchmarks/results/gpu-<model>.json)
#   calibrate.json               `ecolaunch calibrate --json`
#   calibration-<model>.json     the calibration result file(s), as `ecolaunch policy train` reads them
#   environment.txt              nvidia-smi, driver, python, torch, the commit
#
# On simulated GPUs (ECOLAUNCH_SIMULATE set) the same steps run on CPU stand-ins with short runs (gpu_check
# --quick, calibrate --seconds 0.2): that checks this script end to end and measures nothing about a GPU.
# DEVICE_CHECK_SECTIONS narrows gpu_check's sections and DEVICE_CHECK_SKIP_INSTALL=1 leaves out the install (tests
# use both). Exit status: 0 when every step passed or was
# skipped with a reason, 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d -t ecolaunch-device-check-XXXXXX)}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
LOG="$OUT/device_check.log"
STEPS="$OUT/.steps.tsv"
: >"$LOG"
: >"$STEPS"
export PYTHONUNBUFFERED=1
WORK=$(mktemp -d -t ecolaunch-device-work-XXXXXX)
trap 'rm -rf "$WORK"' EXIT

if [ -n "${ECOLAUNCH_SIMULATE:-}" ]; then
    SIMULATED=1
    QUICK=(--quick)
    CAL_ARGS=(--seconds 0.2 --settle-s 0 --budget-s 120)
else
    SIMULATED=0
    QUICK=()
    CAL_ARGS=(--seconds 3 --settle-s 0.5 --budget-s 130)
fi
CAL_ARGS+=(--workloads mm,mm@30,bw,mlp)
SECTIONS=${DEVICE_CHECK_SECTIONS:-sweep,waitpower,launches,sigkill,overhead,waits}

# step NAME LIMIT_S CMD...: run CMD under its own limit, its output appended to the log; one row in $STEPS.
# Exit status 5 from pytest (no test collected or selected) and 77 count as "skip".
step() {
    local name=$1 limit=$2 start rc status
    shift 2
    printf '\n===== %s (limit %ss): %s\n' "$name" "$limit" "$*" >>"$LOG"
    start=$(date +%s.%N)
    timeout --kill-after=15 "$limit" "$@" >>"$LOG" 2>&1
    rc=$?
    case $rc in
        0) status=pass ;;
        5 | 77) status=skip ;;
        124 | 137) status=timeout ;;
        *) status=fail ;;
    esac
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$rc" "$(date +%s.%N)" "$start" "$status" "$*" >>"$STEPS"
    printf '%-10s %-8s rc=%s\n' "$name" "$status" "$rc"
}

{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)"
    echo "simulated: $SIMULATED ${ECOLAUNCH_SIMULATE:-}"
    "$PY" -c 'import sys, platform; print("python:", sys.version.split()[0], platform.platform())'
    "$PY" -c 'import torch; print("torch:", torch.__version__, "cuda:", torch.version.cuda)' 2>&1
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,uuid,driver_version,power.limit,power.default_limit,power.min_limit,power.max_limit,memory.total --format=csv 2>&1
    command -v nvidia-smi >/dev/null && nvidia-smi -q 2>&1 | grep -iE 'MPS|Compute Mode|Persistence' | head -5
} >"$OUT/environment.txt" 2>&1

if [ -n "${DEVICE_CHECK_SKIP_INSTALL:-}" ]; then
    printf 'install\t77\t0\t0\tskip\tDEVICE_CHECK_SKIP_INSTALL is set\n' >>"$STEPS"
else
    step install 90 "$PY" -m pip install -q --no-deps --no-build-isolation -e .
fi
step pytest 60 "$PY" -m pytest -m gpu -q -p no:cacheprovider
GPU_JSON="$WORK/gpu-check.json"
step gpu_check 345 "$PY" benchmarks/gpu_check.py --budget-s 315 --sections "$SECTIONS" --out "$GPU_JSON" \
    "${QUICK[@]}"
if [ -f "$GPU_JSON" ]; then
    model=$("$PY" -c 'import json, sys; sys.path.insert(0, "benchmarks"); import gpu_check; \
print(gpu_check.default_out(json.load(open(sys.argv[1]))).name)' "$GPU_JSON" 2>>"$LOG") || model=gpu-check.json
    cp "$GPU_JSON" "$OUT/$model"
fi
CAL_STATE="$WORK/state"
step calibrate 150 env ECOLAUNCH_STATE_DIR="$CAL_STATE" "$PY" -m ecolaunch calibrate --gpu 0 --json \
    "${CAL_ARGS[@]}"
# calibrate --json printed its document into the log; keep it as a file of its own too
"$PY" - "$LOG" "$OUT/calibrate.json" <<'EOF' 2>>"$LOG"
import json, sys
text = open(sys.argv[1], encoding="utf-8").read()
block = text.rsplit("===== calibrate", 1)[-1].split("\n", 1)[-1]
start = block.find("{")
if start >= 0:
    try:
        doc, _ = json.JSONDecoder().raw_decode(block[start:])
    except ValueError:
        sys.exit(0)
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2, sort_keys=True)
EOF
for f in "$CAL_STATE"/calibration/*.json; do
    [ -f "$f" ] && cp "$f" "$OUT/calibration-$(basename "$f")"
done

"$PY" - "$STEPS" "$OUT/summary.json" "$SIMULATED" <<'EOF'
import json, sys
steps = []
for line in open(sys.argv[1], encoding="utf-8"):
    name, rc, end, start, status, cmd = line.rstrip("\n").split("\t", 5)
    steps.append({"step": name, "rc": int(rc), "seconds": round(float(end) - float(start), 1), "status": status,
                  "command": cmd})
ok = all(s["status"] in ("pass", "skip") for s in steps)
doc = {"schema": "ecolaunch.device_check", "version": 1, "simulated": sys.argv[3] == "1", "ok": ok, "steps": steps,
       "total_s": round(sum(s["seconds"] for s in steps), 1)}
with open(sys.argv[2], "w", encoding="utf-8") as f:
    json.dump(doc, f, indent=2)
print(f"device check: {'ok' if ok else 'FAILED'} in {doc['total_s']} s")
sys.exit(0 if ok else 1)
EOF
rc=$?
rm -f "$STEPS"
echo "results in $OUT"
exit $rc
