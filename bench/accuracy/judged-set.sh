#!/usr/bin/env bash
# The recommend issue's judged set, reproduced from the raw reports in bench/accuracy/fixtures/: every
# multi-GPU DDP run of gpt2-124m, gpt2-355m and the MLPs of 0.8-76M parameters, held out and
# predicted from its own call's all-reduce curve and 1-GPU runs (bench/accuracy/predict-vs-measured.py).
#
#   scripts/judged-set.sh [DDPCHECK]        (default: target/release/ddpcheck)
#   PVM_OPTS="--pool-1gpu" scripts/judged-set.sh   (options for predict-vs-measured.py)
#
# Sessions 2-4 on 2xH200, single launches (the `model`/`model355` phases): 120 cases. The
# `mlprep` runs (three launches each; five in session 5; ten, and eight on the host network, in
# session 6; eight in session 7, with that host's `nocomm` inputs in a second block) are printed
# after, as their own sets. Session 8's runs carry the all-reduce each DDP run timed in its own
# process group: its sets are printed with the sweep's curve and with that one (`--probe-curve`,
# what `recommend` reads). Last, the device cases each at their steadiest measurement: GPT-2 from
# the single launches (steps of 40-100 ms) and the MLPs from sessions 6 and 7; then with session
# 8's MLPs and gpt2-124m added, each run read as recommend reads it. Session 9 measured gpt2-124m
# and gpt2-355m in all three regimes with the probes (three launches): its blocks, then session 8
# and 9 together (every case measured with the probes: the judged scope on today's instrument),
# and last every session's cases. Session 10: the MLPs again (eight launches, another host), and
# base against accum8 with the nocomm runs of the same launches (accumgap).
set -euo pipefail
cd "$(dirname "$0")/../.."
P=${1:-target/release/ddpcheck}
R=bench/accuracy/fixtures
# The folder of a call by its old label.
host() { case $1 in s3) echo 2026-11-30-h200x2-0847;; s4) echo 2026-11-30-h200x2-1031;; s7) echo 2026-11-30-h200x2-1616;; s8) echo 2026-11-30-h200x2-1817;; s10) echo 2026-11-30-h200x2-2243;; esac; }
S2=$R/2026-11-30-h200x2-0713/model S3=$R/2026-11-30-h200x2-0847 S4=$R/2026-11-30-h200x2-1031
# LABEL:CURVE:DDP of one call's regime: case_arg LABEL DIR PREFIX KIND REGIME
case_arg() { echo "$1:$2/$3-curve-$5.json:$2/$3-$4-$5.json"; }
# A session measured with the probes: its set with the sweep's curve, then with the curve its DDP
# runs timed themselves: sweep_and_probes NAME WHAT CASE...
sweep_and_probes() {
    local name=$1 what=$2
    shift 2
    echo
    echo "== $name, the sweep's curve ($what)"
    python3 bench/accuracy/predict-vs-measured.py --min-params 800000 ${PVM_OPTS:-} "$P" "$@"
    echo
    echo "== $name, the curve DDP's runs timed in their own process group (as recommend reads them)"
    python3 bench/accuracy/predict-vs-measured.py --min-params 800000 --probe-curve ${PVM_OPTS:-} "$P" "$@"
}
args=() gpt=()
for r in nvlink shm hostnet; do
    gpt+=("$(case_arg "s2-$r" "$S2" model gpt "$r")" "$(case_arg "s3-355-$r" "$S3/model355" model355 gpt "$r")")
    gpt+=("$(case_arg "s4-$r" "$S4/model" model gpt "$r")" "$(case_arg "s4-355-$r" "$S4/model355" model355 gpt "$r")")
    args+=("$(case_arg "s2-$r" "$S2" model gpt "$r")" "$(case_arg "s2-mlp-$r" "$S2" model mlp "$r")")
    args+=("$(case_arg "s3-355-$r" "$S3/model355" model355 gpt "$r")")
    args+=("$(case_arg "s4-$r" "$S4/model" model gpt "$r")" "$(case_arg "s4-mlp-$r" "$S4/model" model mlp "$r")")
    args+=("$(case_arg "s4-355-$r" "$S4/model355" model355 gpt "$r")")
done
echo "== single launches, sessions 2-4"
python3 bench/accuracy/predict-vs-measured.py --min-params 800000 ${PVM_OPTS:-} "$P" "${args[@]}"
for s in s3 s4; do
    d=$R/$(host $s)/mlprep
    echo
    echo "== mlprep, $s (three launches each)"
    python3 bench/accuracy/predict-vs-measured.py --min-params 800000 ${PVM_OPTS:-} "$P" \
        "$(case_arg "$s-mlp-nvlink" "$d" mlprep mlp nvlink)" "$(case_arg "$s-mlp-shm" "$d" mlprep mlp shm)"
done
d=$R/2026-11-30-h200x2-1213/mlprep5
echo
echo "== mlprep5, s5 (five launches each)"
python3 bench/accuracy/predict-vs-measured.py --min-params 800000 ${PVM_OPTS:-} "$P" \
    "$(case_arg s5-mlp-nvlink "$d" mlprep5 mlp nvlink)" "$(case_arg s5-mlp-shm "$d" mlprep5 mlp shm)"
S6=$R/2026-11-30-h200x2-1404
s6=("$(case_arg s6-mlp-nvlink "$S6/mlprep10" mlprep10 mlp nvlink)" "$(case_arg s6-mlp-shm "$S6/mlprep10" mlprep10 mlp shm)"
    "$(case_arg s6-mlp-hostnet "$S6/mlprep8-hostnet" mlprep8 mlp hostnet)")
echo
echo "== mlprep10, s6 (ten launches each; eight on the host network)"
python3 bench/accuracy/predict-vs-measured.py --min-params 800000 ${PVM_OPTS:-} "$P" "${s6[@]}"
S7=$R/2026-11-30-h200x2-1616
s7=("$(case_arg s7-mlp-nvlink "$S7/mlprep8" mlprep8 mlp nvlink)" "$(case_arg s7-mlp-shm "$S7/mlprep8" mlprep8 mlp shm)"
    "$(case_arg s7-mlp-hostnet "$S7/mlprep8" mlprep8 mlp hostnet)")
echo
echo "== mlprep8, s7 (eight launches each, one host)"
python3 bench/accuracy/predict-vs-measured.py --min-params 800000 ${PVM_OPTS:-} "$P" "${s7[@]}"
echo
echo "== mlprep8, s7, with the nocomm inputs of the same host (eight launches)"
python3 bench/accuracy/predict-vs-measured.py --min-params 800000 --inputs "$S7/nocomm8/mlprep-nocomm-mlp.json" ${PVM_OPTS:-} "$P" "${s7[@]}"
S8=$R/2026-11-30-h200x2-1817
s8=("$(case_arg s8-mlp-nvlink "$S8/mlprep8" mlprep8 mlp nvlink)" "$(case_arg s8-mlp-shm "$S8/mlprep8" mlprep8 mlp shm)"
    "$(case_arg s8-mlp-hostnet "$S8/mlprep8" mlprep8 mlp hostnet)"
    "$(case_arg s8-nvlink "$S8/model3" model3 gpt nvlink)" "$(case_arg s8-hostnet "$S8/model3" model3 gpt hostnet)")
sweep_and_probes s8 "MLPs eight launches, gpt2-124m three, one host a call" "${s8[@]}"
S9=$R/2026-11-30-h200x2-1949
s9=("$(case_arg s9-shm "$S9/model3-shm" model3 gpt shm)"
    "$(case_arg s9-355-nvlink "$S9/model3-355" model3 gpt nvlink)" "$(case_arg s9-355-hostnet "$S9/model3-355" model3 gpt hostnet)"
    "$(case_arg s9-124-nvlink "$S9/model3-124" model3 gpt nvlink)" "$(case_arg s9-124-hostnet "$S9/model3-124" model3 gpt hostnet)")
sweep_and_probes s9 "gpt2-124m and gpt2-355m, three launches, one host" "${s9[@]}"
echo
echo "== s8 and s9, every case measured with the probes (as recommend reads them)"
python3 bench/accuracy/predict-vs-measured.py --min-params 800000 --probe-curve ${PVM_OPTS:-} "$P" "${s8[@]}" "${s9[@]}"
S10=$R/2026-11-30-h200x2-2243
s10=("$(case_arg s10-mlp-nvlink "$S10/mlprep8" mlprep8 mlp nvlink)" "$(case_arg s10-mlp-shm "$S10/mlprep8" mlprep8 mlp shm)"
    "$(case_arg s10-mlp-hostnet "$S10/mlprep8" mlprep8 mlp hostnet)")
sweep_and_probes s10 "MLPs eight launches, host K" "${s10[@]}"
# The accumgap call (host L) ran no sweep: its curve is its runs' probes alone, set in host K's
# NVLink sweep report (only that report's header is kept). Its nocomm runs are the model's inputs.
s10g=("s10-accumgap-nvlink:$S10/mlprep8/mlprep8-curve-nvlink.json:$S10/accumgap/accumgap-mlp-nvlink.json")
echo
echo "== s10 accumgap, base and accum8 with the nocomm runs of the same launches (eight, host L)"
python3 bench/accuracy/predict-vs-measured.py --min-params 800000 --probe-curve ${PVM_OPTS:-} "$P" "${s10g[@]}"
echo
echo "== s8, s9 and s10, every case measured with the probes (as recommend reads them)"
python3 bench/accuracy/predict-vs-measured.py --min-params 800000 --probe-curve ${PVM_OPTS:-} "$P" "${s8[@]}" "${s9[@]}" "${s10[@]}" "${s10g[@]}"
echo
echo "== device cases: GPT-2 single launches (sessions 2-4), MLPs repeated (s6, s7)"
python3 bench/accuracy/predict-vs-measured.py --min-params 800000 ${PVM_OPTS:-} "$P" "${gpt[@]}" "${s6[@]}" "${s7[@]}"
echo
echo "== device cases with s8, each run's curve as recommend reads it (s8: DDP's own; before: the sweep)"
python3 bench/accuracy/predict-vs-measured.py --min-params 800000 --probe-curve ${PVM_OPTS:-} "$P" "${gpt[@]}" "${s6[@]}" "${s7[@]}" "${s8[@]}"
echo
echo "== device cases with s8 and s9, each run's curve as recommend reads it"
python3 bench/accuracy/predict-vs-measured.py --min-params 800000 --probe-curve ${PVM_OPTS:-} "$P" "${gpt[@]}" "${s6[@]}" "${s7[@]}" "${s8[@]}" "${s9[@]}"
echo
echo "== device cases with s8, s9 and s10, each run's curve as recommend reads it"
python3 bench/accuracy/predict-vs-measured.py --min-params 800000 --probe-curve ${PVM_OPTS:-} "$P" "${gpt[@]}" "${s6[@]}" "${s7[@]}" "${s8[@]}" "${s9[@]}" "${s10[@]}" "${s10g[@]}"
