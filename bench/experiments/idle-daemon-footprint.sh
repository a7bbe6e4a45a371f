#!/usr/bin/env bash
# The idle daemon's footprint on a real GPU node. Starts .device/ddpcheckd on the node's GPUs
# (NVML loaded, default collector interval 30 s) with a temporary config, socket, state and
# runtime folder, waits for its ready line and a settling pause, then for WINDOW seconds samples
# /proc/PID/status once a second (VmRSS, RssAnon, RssFile, RssShmem, Threads), scrapes /metrics
# every SCRAPE seconds as a Prometheus would, and reads CPU time (utime+stime of /proc/PID/stat)
# at both ends of the window. Then dumps smaps_rollup, every mapping of /proc/PID/smaps sorted by
# RSS, the same summed by object, and the thread names, and stops the daemon with SIGTERM.
# The same again with `--sim h200x2-nvlink` (no NVML, same binary): the difference is what NVML
# and the real backend cost.
#   bench/experiments/idle-daemon-footprint.sh OUTDIR     (about 170 s; as root, as under systemd)
# Writes OUTDIR/summary.txt and OUTDIR/footprint.tgz (samples, smaps and log of each pass).
# Environment: DDPCHECK_BIN_DIR (bench/lib.sh), WINDOW (60), SETTLE (15), SCRAPE (15; 0:
# none), PORT (19402), PASSES ("real sim").
set -uo pipefail
# shellcheck source=../lib.sh
. "$(dirname "$0")/../lib.sh"
out_dir "${1:-}"
need_bin ddpcheckd
WINDOW=${WINDOW:-60} SETTLE=${SETTLE:-15} SCRAPE=${SCRAPE:-15} PORT=${PORT:-19402}
PASSES=${PASSES:-real sim}
# The daemon reads no DDPCHECK_ setting but its config's (bench/lib.sh exports a few).
for v in $(env | sed -n 's/^\(DDPCHECK_[A-Z_]*\)=.*/\1/p'); do unset "$v"; done
SUMMARY=$OUT/summary.txt
RAW=$(mktemp -d /tmp/ddpcheck-footprint-raw.XXXXXX)
: > "$SUMMARY"
say "idle-daemon-footprint $(date -u +%Y-%m-%dT%H:%M:%SZ) host $(hostname) cores $(nproc)"
say "binary $DDPCHECKD: $("$DDPCHECKD" --version 2>&1) size $(stat -c %s "$DDPCHECKD") B"
nvidia-smi --query-gpu=name,driver_version,pci.bus_id --format=csv,noheader 2>&1 | sed 's/^/gpu /' | tee -a "$SUMMARY"

scrape() {
    curl -s -o /dev/null -w '%{http_code} %{size_download} B' "http://127.0.0.1:$PORT/metrics" 2> /dev/null ||
        "$PYTHON" -c "import urllib.request as u; print(200, len(u.urlopen('http://127.0.0.1:$PORT/metrics').read()), 'B')"
}

# measure NAME [FLAGS...]: one daemon, sampled as described above; raw files to $RAW/NAME.*.
measure() {
    local name=$1 tmp pid t0 t1 c0 c1 i hz
    shift
    tmp=$(mktemp -d /tmp/ddpcheck-footprint.XXXXXX)
    : > "$tmp/ddpcheck.toml" # an empty file: /etc/ddpcheck/ddpcheck.toml is not read
    "$DDPCHECKD" --config "$tmp/ddpcheck.toml" --listen "$tmp/d.sock" --state-dir "$tmp/state" \
        --runtime-dir "$tmp/run" --metrics-listen "127.0.0.1:$PORT" "$@" 2> "$RAW/$name.log" &
    pid=$!
    for _ in $(seq 1 300); do
        grep -q '^ddpcheckd: ready' "$RAW/$name.log" && break
        kill -0 "$pid" 2> /dev/null || break
        sleep 0.1
    done
    say ""
    say "== $name: ddpcheckd $*"
    if ! grep -q '^ddpcheckd: ready' "$RAW/$name.log"; then
        say "FAILED: no ready line within 30 s: $(tail -3 "$RAW/$name.log")"
        kill "$pid" 2> /dev/null; wait "$pid"; rm -rf "$tmp"; return 1
    fi
    say "$(grep '^ddpcheckd: ready' "$RAW/$name.log")"
    say "first scrape: $(scrape)"
    sleep "$SETTLE"
    hz=$(getconf CLK_TCK)
    t0=$(date +%s.%N) c0=$(awk '{ print $14 + $15 }' "/proc/$pid/stat")
    printf 's\tVmRSS_kB\tRssAnon_kB\tRssFile_kB\tRssShmem_kB\tThreads\n' > "$RAW/$name.samples.tsv"
    for i in $(seq 1 "$WINDOW"); do
        awk -v s="$i" '/^(VmRSS|RssAnon|RssFile|RssShmem|Threads):/ { v[$1] = $2 }
            END { printf "%d\t%d\t%d\t%d\t%d\t%d\n", s, v["VmRSS:"], v["RssAnon:"], v["RssFile:"], v["RssShmem:"], v["Threads:"] }' \
            "/proc/$pid/status" >> "$RAW/$name.samples.tsv"
        if [ "$SCRAPE" -gt 0 ] && [ $((i % SCRAPE)) -eq 0 ]; then scrape > /dev/null; fi
        sleep 1
    done
    t1=$(date +%s.%N) c1=$(awk '{ print $14 + $15 }' "/proc/$pid/stat")
    say "window $WINDOW s after $SETTLE s settling; /metrics scraped every $SCRAPE s; collector every 30 s (default)"
    awk -F'\t' 'NR > 1 { for (c = 2; c <= 6; c++) { if ($c > mx[c]) mx[c] = $c; sum[c] += $c } n++ }
        END { split("VmRSS RssAnon RssFile RssShmem Threads", h, " ")
              for (c = 2; c <= 5; c++) printf "%s max %.1f MiB mean %.1f MiB\n", h[c - 1], mx[c] / 1024, sum[c] / n / 1024
              printf "Threads max %d mean %.1f\n", mx[6], sum[6] / n }' "$RAW/$name.samples.tsv" | tee -a "$SUMMARY"
    awk -v a="$c0" -v b="$c1" -v t0="$t0" -v t1="$t1" -v hz="$hz" 'BEGIN {
        printf "cpu %.4f%% of one core (%d ticks of 1/%d s in %.1f s)\n", (b - a) / hz / (t1 - t0) * 100, b - a, hz, t1 - t0 }' | tee -a "$SUMMARY"
    {
        echo "## /proc/PID/status"; cat "/proc/$pid/status"
        echo; echo "## /proc/PID/smaps_rollup"; cat "/proc/$pid/smaps_rollup"
        echo; echo "## threads (count name)"; cat /proc/"$pid"/task/*/comm | sort | uniq -c
        echo; echo "## RSS by object (kB: Rss Anonymous Private_Dirty Shared_Clean mappings object)"
        awk '/^[0-9a-f]+-[0-9a-f]+ / { obj = ($6 == "") ? "[anon]" : $6; n[obj]++ }
             /^Rss:/ { r[obj] += $2 } /^Anonymous:/ { a[obj] += $2 } /^Private_Dirty:/ { d[obj] += $2 }
             /^Shared_Clean:/ { sc[obj] += $2 }
             END { for (o in r) printf "%8d %8d %8d %8d %4d %s\n", r[o], a[o], d[o], sc[o], n[o], o }' "/proc/$pid/smaps" | sort -rn
        echo; echo "## every mapping by RSS (kB: Rss Anonymous; address perms object)"
        awk '/^[0-9a-f]+-[0-9a-f]+ / { hdr = $1 " " $2 " " (($6 == "") ? "[anon]" : $6) }
             /^Rss:/ { rss = $2 } /^Anonymous:/ { printf "%8d %8d %s\n", rss, $2, hdr }' "/proc/$pid/smaps" | sort -rn
    } > "$RAW/$name.smaps.txt"
    say "rollup: $(grep -E '^(Rss|Anonymous|Private_Dirty|Private_Clean|Shared_Clean):' "/proc/$pid/smaps_rollup" | tr -s ' ' | tr '\n' ' ')"
    say "threads: $(cat /proc/"$pid"/task/*/comm | sort | uniq -c | tr -s ' ' | tr '\n' ';')"
    say "largest objects (kB: Rss Anon PrivDirty SharedClean mappings object):"
    sed -n '/^## RSS by object/,/^$/p' "$RAW/$name.smaps.txt" | sed -n '2,13p' | tee -a "$SUMMARY"
    kill -TERM "$pid"
    wait "$pid"
    say "exit status $? after SIGTERM"
    rm -rf "$tmp"
}

for pass in $PASSES; do
    case $pass in
        real) measure real ;;
        sim) measure sim --sim h200x2-nvlink ;;
        *) say "unknown pass $pass" ;;
    esac
done
tar -C "$RAW" -czf "$OUT/footprint.tgz" .
rm -rf "$RAW"
say ""
say "done $(date -u +%Y-%m-%dT%H:%M:%SZ)"
