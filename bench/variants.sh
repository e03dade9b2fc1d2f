#!/bin/bash
# Per-sample eBPF cost of spanprof builds side by side with bpftrace.
#
#   sudo bench/variants.sh [-s SECONDS] [-w chain|deep] [-p] BUILD...
#
# -p records the two workload processes only (--pid) rather than --all:
# the programs still run on every tick, and return early for the other
# processes, so the ns per run is lower and only builds compare; on a busy
# machine it leaves out the other processes' stacks (a young process's
# samples carry the widest stack window until its window is sized).
#
# Each BUILD is a spanprof binary (e.g. one built from a copy of the
# program with one part changed). Two workloads run, bpftrace
# `profile:hz:999 { @[kstack, ustack] = count(); }` and every BUILD
# (`record --all --frequency 999`) attach to them at once, and one
# `bpftool prog show` before and one after the window give every
# profiler's perf_event programs the same window. Prints each one's ns per
# run and its ratio to bpftrace. Run a BUILD alone with bpftrace, rounds
# interleaved, to compare builds: the ratio depends on how many profilers
# share the ticks. Needs root, bpftrace, bpftool and the test fixtures
# (make -C testdata/fixtures, make -C testdata/bench).
set -euo pipefail
secs=6 wl=chain scope=--all
while getopts s:w:p o; do
	case $o in
	p) scope=pids ;;
	s) secs=$OPTARG ;;
	w) wl=$OPTARG ;;
	*) exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ $# -gt 0 ] || { echo "usage: $0 [-s SECONDS] [-w chain|deep] [-p] BUILD..." >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
sysctl -qw kernel.bpf_stats_enabled=1 # run_time_ns; left on, as make bench leaves it
tmp=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
for _ in 1 2; do
	if [ "$wl" = deep ]; then
		"$root/testdata/bench/build/deep" 40 100000000 >/dev/null &
	else
		"$root/testdata/fixtures/build/chain-clang" 100000000 /dev/null fixed >/dev/null &
	fi
	pids+=($!)
done
bpftrace -e 'profile:hz:999 { @[kstack, ustack] = count(); }' >/dev/null 2>&1 &
pids+=($!)
names=(bpftrace) owners=($!)
i=0
for b in "$@"; do
	target=(--all)
	[ "$scope" = pids ] && target=(--pid "${pids[0]}" --pid "${pids[1]}")
	"$b" record "${target[@]}" --frequency 999 --duration 1h --output "$tmp/$i.pb.gz" >"$tmp/$i.log" 2>&1 &
	pids+=($!)
	names+=("$b") owners+=($!)
	i=$((i + 1))
done
sleep 4 # attached and past start-up
for k in "${!names[@]}"; do
	echo "${names[$k]} $(grep -h '^prog_id:' /proc/"${owners[$k]}"/fdinfo/* 2>/dev/null | awk '{print $2}' | sort -u | tr '\n' ' ')"
done >"$tmp/ids"
bpftool prog show -j >"$tmp/s0"
sleep "$secs"
bpftool prog show -j >"$tmp/s1"
python3 - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
s0 = {o["id"]: o for o in json.load(open(d + "/s0"))}
s1 = {o["id"]: o for o in json.load(open(d + "/s1"))}
rows = []
for line in open(d + "/ids"):
    f = line.split()
    t = c = 0
    for i in map(int, f[1:]):
        if i in s0 and i in s1 and s1[i].get("type") == "perf_event":
            t += s1[i].get("run_time_ns", 0) - s0[i].get("run_time_ns", 0)
            c += s1[i].get("run_cnt", 0) - s0[i].get("run_cnt", 0)
    rows.append((f[0], t / max(c, 1), c))
bt = rows[0][1]
for name, ns, runs in rows:
    print("%s: %.0f ns per run (%d runs)%s" % (name, ns, runs, "" if name == "bpftrace" else ", ratio %.3f" % (ns / bt)))
PY
