#!/bin/bash
# Slurm prolog: checks the node with ddpcheck before a job runs; drains it when the check fails.
#
# slurm.conf: Prolog=/etc/slurm/prolog.d/ddpcheck-prolog.sh, PrologFlags=Alloc (slurm.conf.snippet).
# Runs as root on the compute node, once per job allocation, with the job's SLURM_* variables
# (ddpcheck restricts the check to SLURM_JOB_GPUS).
#
# It asks the node's daemon first (a verdict at most DDPCHECK_MAX_AGE seconds old is reused, so
# back-to-back jobs do not each pay for a check), and runs the check locally when there is no
# daemon socket or the daemon does not answer. Exit 0 lets the job run. Otherwise it drains the
# node with the `ddpcheck:` line as the reason (visible in `sinfo -R`) and exits 1; Slurm then
# requeues a batch job elsewhere. Verdicts: OK, BUSY, WARNING run the job (WARNING drains only
# with DDPCHECK_PROLOG_ARGS=--fail-on-warning); CRITICAL, TIMEOUT, UNKNOWN drain
# (docs/exit-codes.md).
#
# Settings, from the environment or from $DDPCHECK_PROLOG_CONF (slurmd gives prologs a bare
# environment, so a site sets them in that file):
#   DDPCHECK_BIN          ddpcheck binary   [/usr/local/bin/ddpcheck, else the package's /usr/bin/ddpcheck]
#   DDPCHECK_SOCKET       the daemon's socket                [/run/ddpcheck/ddpcheck.sock]
#   DDPCHECK_MAX_AGE      reuse the daemon's verdict up to this age, seconds   [300]
#   DDPCHECK_TIMEOUT      hard limit of one check, seconds; keep it below
#                         PrologEpilogTimeout                [90]
#   DDPCHECK_PROLOG_ARGS  extra arguments of `ddpcheck check`, split on spaces
#                         (e.g. "--fail-on-warning", "--deadline 20")
#   DDPCHECK_DRAIN        1: drain the node on failure; 0: only fail the prolog   [1]
#   SCONTROL              scontrol binary                    [scontrol]
set -u

DDPCHECK_PROLOG_CONF=${DDPCHECK_PROLOG_CONF:-/etc/ddpcheck/prolog.env}
if [ -r "$DDPCHECK_PROLOG_CONF" ]; then
    # shellcheck disable=SC1090
    . "$DDPCHECK_PROLOG_CONF"
fi
# slurmd runs prologs without PATH.
export PATH="${PATH:+$PATH:}/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# A build installed by hand, else the Debian package's.
if [ -z "${DDPCHECK_BIN:-}" ] && [ ! -x /usr/local/bin/ddpcheck ] && [ -x /usr/bin/ddpcheck ]; then
    DDPCHECK_BIN=/usr/bin/ddpcheck
fi
DDPCHECK_BIN=${DDPCHECK_BIN:-/usr/local/bin/ddpcheck}
DDPCHECK_SOCKET=${DDPCHECK_SOCKET:-/run/ddpcheck/ddpcheck.sock}
DDPCHECK_MAX_AGE=${DDPCHECK_MAX_AGE:-300}
DDPCHECK_TIMEOUT=${DDPCHECK_TIMEOUT:-90}
DDPCHECK_PROLOG_ARGS=${DDPCHECK_PROLOG_ARGS:-}
DDPCHECK_DRAIN=${DDPCHECK_DRAIN:-1}
SCONTROL=${SCONTROL:-scontrol}
node=${SLURMD_NODENAME:-$(hostname -s)}

# Word splitting of the extra arguments is intended (no arguments contain spaces).
read -r -a extra <<<"$DDPCHECK_PROLOG_ARGS"

errf=$(mktemp "${TMPDIR:-/tmp}/ddpcheck-prolog.XXXXXX") || errf=/dev/null
trap '[ "$errf" = /dev/null ] || rm -f "$errf"' EXIT
line=""
err=""
rc=0
# Runs `ddpcheck check --prolog ARGS...` under a hard timeout; sets $line (the verdict line, or
# empty), $err (the last line ddpcheck wrote to stderr) and $rc.
run_check() {
    local out
    out=$(timeout -k 5 "$DDPCHECK_TIMEOUT" "$DDPCHECK_BIN" check --prolog "$@" "${extra[@]}" 2>"$errf")
    rc=$?
    line=$(printf '%s\n' "$out" | grep -m1 -E '^ddpcheck: (OK|WARNING|CRITICAL|UNKNOWN|BUSY|TIMEOUT): ' || true)
    err=$(tail -n 1 "$errf" 2>/dev/null || true)
}

# A usable answer is exit 0 or 1 with a `ddpcheck:` line; anything else means ddpcheck itself
# could not answer (daemon gone, bad arguments, killed by the timeout).
answered() { [ -n "$line" ] && { [ "$rc" -eq 0 ] || [ "$rc" -eq 1 ]; }; }

if [ -S "$DDPCHECK_SOCKET" ]; then
    run_check --daemon "$DDPCHECK_SOCKET" --max-age "$DDPCHECK_MAX_AGE"
    # UNKNOWN through the daemon may only mean the daemon is gone: the local check decides.
    # Not after a timeout: a second full check would outlast PrologEpilogTimeout.
    if [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] &&
        { ! answered || [ "${line#ddpcheck: UNKNOWN:}" != "$line" ]; }; then
        echo "ddpcheck-prolog: daemon at $DDPCHECK_SOCKET gave no verdict (exit $rc: ${line:-$err}); checking locally" >&2
        run_check
    fi
else
    run_check
fi

if ! answered; then
    case $rc in
        124 | 137) line="ddpcheck: TIMEOUT: the check ran past ${DDPCHECK_TIMEOUT} s" ;;
        *) line="ddpcheck: UNKNOWN: ddpcheck exited $rc${err:+: ${err#ddpcheck: }}" ;;
    esac
    rc=1
fi

# slurmd logs a failed prolog's output; the line is the whole story.
echo "$line"
if [ "$rc" -eq 0 ]; then
    exit 0
fi
if [ "$DDPCHECK_DRAIN" = 1 ]; then
    # scontrol's own messages go to stderr: stdout carries only the line.
    if ! "$SCONTROL" update nodename="$node" state=drain reason="$line" >&2; then
        echo "ddpcheck-prolog: scontrol could not drain $node" >&2
    fi
fi
exit 1
