#!/usr/bin/env bash
# bench/offcpu.sh - eBPF time per context switch of spanprof's off-CPU
# sampler against libbpf-tools offcputime, side by side in one run on one
# switch-heavy workload (testdata/offcpu/pingpong: two threads passing a
# byte over pipes).
#
#   sudo bench/offcpu.sh            # DURATION=10 seconds measured
#
# All programs hang off the same sched_switch tracepoint at the same time,
# so they run on exactly the same switches; kernel.bpf_stats_enabled gives
# each program's run_time_ns and run_cnt, read twice while all run, so
# loading and exit are left out. The programs measured:
#   spanprof        spanprof record --off-cpu (default threshold: sampled)
#   offcputime      /usr/sbin/offcputime -p PID (every wait, stack ids)
#   spanprof-all    with ALL=1: spanprof --off-cpu-threshold 1ns, every
#                   wait captured (the cost sampling avoids). Off by
#                   default: its memory traffic on every switch also slows
#                   the others down.
# The target (SPEC) is spanprof at most a tenth of offcputime per switch.
set -euo pipefail

DURATION=${DURATION:-10}
# THRESHOLD sets --off-cpu-threshold of the sampled spanprof (default: the
# built-in default).
THRESHOLD=${THRESHOLD:-}
ALL=${ALL:-0}
OFFCPUTIME=${OFFCPUTIME:-/usr/sbin/offcputime}
cd "$(dirname "$0")/.."

die() { echo "bench/offcpu.sh: $*" >&2; exit 1; }
[[ $EUID -eq 0 ]] || die "needs root (loads eBPF programs, sets kernel.bpf_stats_enabled)"
for tool in bpftool jq go make "$OFFCPUTIME"; do
	command -v "$tool" >/dev/null || die "$tool not found (make bench-deps installs the peers)"
done

tmp=$(mktemp -d)
pids=()
stats_before=$(sysctl -n kernel.bpf_stats_enabled)
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	sysctl -qw kernel.bpf_stats_enabled="$stats_before"
	rm -rf "$tmp"
}
trap cleanup EXIT

make -s -C testdata/offcpu
go build -o "$tmp/spanprof" ./cmd/spanprof
sysctl -qw kernel.bpf_stats_enabled=1

# prog_ids NAME: ids of loaded programs with that name (bpftool shows the
# full name from BTF).
prog_ids() { bpftool prog show -j | jq -r --arg n "$1" '.[] | select(.name == $n) | .id' | sort; }

# new_prog NAME BEFORE: waits for a program NAME not in BEFORE that runs,
# prints its id. Requiring runs skips programs other spanprof processes on
# the machine loaded without attaching them (every spanprof loads it).
new_prog() {
	local name=$1 before=$2 id
	for _ in $(seq 300); do
		for id in $(comm -13 <(echo "$before") <(prog_ids "$name")); do
			if (($(bpftool prog show id "$id" -j | jq -r '.run_cnt // 0') > 0)); then
				echo "$id"
				return
			fi
		done
		sleep 0.1
	done
	die "program $name did not appear"
}

# stats ID: "run_time_ns run_cnt" of a program.
stats() { bpftool prog show id "$1" -j | jq -r '"\(.run_time_ns // 0) \(.run_cnt // 0)"'; }

total=$((DURATION + 30))
testdata/offcpu/build/pingpong "$total" > "$tmp/pingpong.out" &
pids+=($!)
wl=$!
sleep 0.2

names=() ids=()
start_spanprof() { # LABEL ARGS...
	local label=$1; shift
	local before; before=$(prog_ids sched_switch_btf)
	"$tmp/spanprof" record --pid "$wl" --frequency 1 --off-cpu "$@" \
		--duration "${total}s" --output "$tmp/$label.folded" 2> "$tmp/$label.err" &
	pids+=($!)
	names+=("$label"); ids+=("$(new_prog sched_switch_btf "$before")")
}
start_spanprof spanprof ${THRESHOLD:+--off-cpu-threshold "$THRESHOLD"}
if [[ $ALL == 1 ]]; then start_spanprof spanprof-all --off-cpu-threshold 1ns; fi
before=$(prog_ids sched_switch)
"$OFFCPUTIME" -p "$wl" "$total" > "$tmp/offcputime.out" 2>&1 &
pids+=($!)
names+=(offcputime); ids+=("$(new_prog sched_switch "$before")")

sleep 1
declare -A t0 c0
for i in "${!ids[@]}"; do read -r t0[$i] c0[$i] < <(stats "${ids[$i]}"); done
ctx0=$(awk '/^ctxt/ {print $2}' /proc/stat)
sleep "$DURATION"
ctx1=$(awk '/^ctxt/ {print $2}' /proc/stat)
declare -A ns
printf '%-14s %12s %14s %12s\n' program switches run_time_ns ns/switch
for i in "${!ids[@]}"; do
	read -r t1 c1 < <(stats "${ids[$i]}")
	dc=$((c1 - c0[$i])) dt=$((t1 - t0[$i]))
	((dc > 0)) || die "${names[$i]}: no runs in ${DURATION}s"
	ns[$i]=$(awk -v t="$dt" -v c="$dc" 'BEGIN { printf "%.1f", t / c }')
	printf '%-14s %12d %14d %12s\n' "${names[$i]}" "$dc" "$dt" "${ns[$i]}"
done
last=$((${#ids[@]} - 1))
echo "context switches on the machine: $(((ctx1 - ctx0) / DURATION))/s over ${DURATION}s"
for ((i = 0; i < last; i++)); do
	awk -v a="${ns[$i]}" -v b="${ns[$last]}" -v n="${names[$i]}" \
		'BEGIN { printf "ratio %s / offcputime: %.3f\n", n, a / b }'
done
awk -v a="${ns[0]}" -v b="${ns[$last]}" 'BEGIN {
	r = a / b
	printf "target: spanprof <= 0.1 x offcputime per switch: %s (%.3f)\n", r <= 0.1 ? "met" : "NOT met", r
}'
# Stop the recorders and show what the sampled one kept.
for p in "${pids[@]:1}"; do kill -INT "$p" 2>/dev/null || true; done
wait "${pids[@]:1}" 2>/dev/null || true
grep -h "off-CPU\|lost" "$tmp"/spanprof*.err || true
