#!/usr/bin/env bash
# bench/soak.sh - run `spanprof agent` under mixed load and report its RSS,
# goroutines, threads, open files and tracked processes over time: none of
# them may grow once the agent warmed up.
#
#   sudo bench/soak.sh                  # DURATION=600 seconds (make soak)
#   sudo DURATION=120 INTERVAL=10 bench/soak.sh
#
# Load, all at once: process churn (CHURN_RATE short-lived processes a
# second, testdata/reliability/churn), a process whose thread context
# alternates honest and lying records (testdata/reliability/liar), large
# Go programs coming and going (below), and the agent's own off-CPU
# sampling of everything that sleeps. The agent exports
# to ENDPOINT (default 127.0.0.1:1, where nothing listens: every export
# fails, so the bounded retry queue is soaked too; point it at a collector
# to soak delivery instead). Goroutines come from the agent's /metrics
# (go_goroutines), the rest from /proc/PID.
#
# Large Go programs: every BIG_EVERY seconds (default 90; 0 turns them
# off) a fresh spanprof binary is linked with a GNU build ID of its own
# (the build cache is warm, so the go command and the linker, large Go
# programs themselves, work a few seconds), then run for BIG_FOR seconds
# (default 20) as one short-lived `spanprof check` process after another,
# then deleted. Each is a new 30 MB Go binary to the agent's symbol and
# unwind caches, and the earlier ones are never seen again: what the
# caches keep of them must stay bounded and go once they are idle.
# BIG_UNTIL (seconds, default DURATION) starts the last of them earlier,
# to watch the agent's RSS come back once they are idle (5 minutes).
#
# SPANPROF_MEMPROFILE=FILE in the environment makes the agent write its
# heap profile there when the run ends (go tool pprof -top FILE).
#
# Verdict: the last third's mean against the second third's (the first is
# warm-up: symbol caches fill); growth above GROWTH_PCT percent (default
# 25) in RSS, goroutines, open files or processes retained after a report
# fails the run (exit 1), and so does
# RSS growth above GROWTH_MIB MiB (default 32) whatever the percentage:
# on a high base, a leak of a few MiB a minute stays under 25 % over ten
# minutes (44 -> 407 MiB, middle third 334, last 391: +17 %).
set -euo pipefail

DURATION=${DURATION:-600}
INTERVAL=${INTERVAL:-30}
CHURN_RATE=${CHURN_RATE:-200}
FREQUENCY=${FREQUENCY:-99}
ENDPOINT=${ENDPOINT:-127.0.0.1:1}
METRICS=${METRICS:-127.0.0.1:19464}
GROWTH_PCT=${GROWTH_PCT:-25}
GROWTH_MIB=${GROWTH_MIB:-32}
BIG_EVERY=${BIG_EVERY:-90}
BIG_FOR=${BIG_FOR:-20}
BIG_UNTIL=${BIG_UNTIL:-$DURATION}
cd "$(dirname "$0")/.."

die() { echo "bench/soak.sh: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "needs root to load eBPF programs"
command -v curl >/dev/null || die "needs curl for the agent's /metrics"

GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

"$GO" build -o "$tmp/spanprof" ./cmd/spanprof
make -s -C testdata/reliability

"$tmp/spanprof" agent --endpoint "$ENDPOINT" --insecure --frequency "$FREQUENCY" --off-cpu \
	--report-interval 10s --metrics-listen "$METRICS" --log-level warn 2>"$tmp/agent.log" &
agent=$!
pids+=("$agent")
for _ in $(seq 100); do
	curl -sf "http://$METRICS/metrics" >/dev/null && break
	kill -0 "$agent" 2>/dev/null || { cat "$tmp/agent.log"; die "agent exited"; }
	sleep 0.2
done

build=testdata/reliability/build
"$build/churn" "$PWD/$build/churn-child" "$CHURN_RATE" "$DURATION" 300 >/dev/null &
pids+=($!)
"$build/liar" "$DURATION" >/dev/null &
pids+=($!)
(while sleep 0.01; do :; done) &
pids+=($!)
# The big programs' schedule runs off the script's clock ($SECONDS), so
# every third of the run sees the same number of them.
big() {
	local gen=0 bin until
	SECONDS=0
	while [ "$SECONDS" -lt "$BIG_UNTIL" ]; do
		gen=$((gen + 1))
		bin=$tmp/big-$gen
		CGO_ENABLED=0 "$GO" build -o "$bin" -ldflags "-B 0x$(printf '%08x%032x' $$ "$gen")" ./cmd/spanprof ||
			{ echo "bench/soak.sh: building big program $gen failed; no more of them" >&2; return; }
		until=$((SECONDS + BIG_FOR))
		while [ "$SECONDS" -lt "$until" ]; do "$bin" check "$bin" >/dev/null 2>&1 || true; done
		rm -f "$bin"
		while [ "$SECONDS" -lt $((gen * BIG_EVERY)) ]; do sleep 1; done
	done
}
if [ "$BIG_EVERY" -gt 0 ]; then
	big &
	pids+=($!)
fi

metric() { { curl -sf -m 5 "http://$METRICS/metrics" || true; } | awk -v m="$1" '$1 == m { print $2; exit }'; }
status() { awk -v f="$1:" '$1 == f { print $2; exit }' "/proc/$agent/status"; }

# processes: tracked right now, a sawtooth that climbs with every process
# started and falls at each report; retained: tracked right after the last
# report, its floor, the one that must not grow.
printf '%8s %9s %10s %8s %6s %9s %9s\n' seconds rss_mib goroutines threads fds processes retained | tee "$tmp/series"
start=$(date +%s)
while :; do
	now=$(( $(date +%s) - start ))
	kill -0 "$agent" 2>/dev/null || { cat "$tmp/agent.log"; die "agent died after ${now}s"; }
	rss=$(( $(status VmRSS) / 1024 ))
	gor=$(metric go_goroutines); gor=${gor:-0}
	thr=$(status Threads)
	fds=$(ls "/proc/$agent/fd" | wc -l)
	procs=$(metric spanprof_processes_tracked); procs=${procs:-0}
	kept=$(metric spanprof_processes_retained); kept=${kept:-0}
	printf '%8d %9d %10.0f %8d %6d %9.0f %9.0f\n' "$now" "$rss" "$gor" "$thr" "$fds" "$procs" "$kept" | tee -a "$tmp/series"
	[ "$now" -ge "$DURATION" ] && break
	sleep "$INTERVAL"
done
echo "peak RSS (VmHWM): $(( $(status VmHWM) / 1024 )) MiB"
{ curl -sf -m 5 "http://$METRICS/metrics" || true; } | grep -E '^spanprof_.*(lost|drop)[a-z_]*(\{[^}]*\})? [1-9]' | sed 's/^/counted: /' || true

# Second third against last third.
awk -v g="$GROWTH_PCT" -v gmib="$GROWTH_MIB" 'NR > 1 { n++; rss[n]=$2; gor[n]=$3; fds[n]=$5; kept[n]=$7 }
END {
	if (n < 3) { print "verdict: too few samples (raise DURATION or lower INTERVAL)"; exit 0 }
	a = int(n/3) + 1; b = int(2*n/3); c = b + 1
	split("rss goroutines fds retained", names, " ")
	split("16 8 8 50", slack, " ") # growth below these absolute amounts is noise
	fail = 0
	for (k = 1; k <= 4; k++) {
		mid = 0; last = 0; m = 0; l = 0
		for (i = a; i <= b; i++) { v = (k==1 ? rss[i] : k==2 ? gor[i] : k==3 ? fds[i] : kept[i]); mid += v; m++ }
		for (i = c; i <= n; i++) { v = (k==1 ? rss[i] : k==2 ? gor[i] : k==3 ? fds[i] : kept[i]); last += v; l++ }
		mid /= m; last /= l
		growth = mid > 0 ? 100 * (last - mid) / mid : 0
		printf "%-10s middle third %8.1f  last third %8.1f  growth %+6.1f%%\n", names[k], mid, last, growth
		if (growth > g && last - mid > slack[k]) fail = 1
		if (k == 1 && last - mid > gmib) fail = 1
	}
	if (fail) { print "verdict: GROWTH"; exit 1 }
	print "verdict: no growth"
}' "$tmp/series"
