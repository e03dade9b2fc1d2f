#!/bin/sh
# The kernel-matrix workload, run by busybox sh in the guest (and by the
# host's sh for the host kernel). R is the directory holding spanprof, the
# sink and the fixtures; W a scratch directory. Every result is a line
# "=== RESULT name key=value..." or a file between "=== FILE name" and
# "=== END name" (gzip, base64): the host test scores them.
set -u
: "${R:?}" "${W:?}"
# The host test's settings for the run (guestEnv): STEPS, FLIP_RUNS.
[ -f "$R/env" ] && . "$R/env"
FREQ=${FREQ:-99}
CORR_FREQ=${CORR_FREQ:-499}

result() { echo "=== RESULT $*"; }
emit() {
	if [ ! -f "$2" ]; then
		echo "=== RESULT missing file=$1"
		return
	fi
	echo "=== FILE $1"
	gzip -c "$2" | base64
	echo "=== END $1"
}
now() { cut -d' ' -f1 /proc/uptime; }
# run_timed FIFO PID VAR: starts the gated fixture PID and sets VAR to the
# CPU seconds it took, from the CPU time of the shell's reaped children
# before and after its wait: what a sampler at F Hz sees F times a second
# (its busy windows in wall time overstate it on a loaded machine). times
# runs in this shell: a command substitution's subshell counts its own.
run_timed() {
	times >"$W/times0"
	echo go >"$1"
	wait "$2"
	times >"$W/times1"
	eval "$3=$(awk 'function s(x) { sub(/s$/, "", x); split(x, a, "m"); return a[1] * 60 + a[2] }
		FNR == 2 { c[++n] = s($1) + s($2) } END { printf "%.3f", c[2] - c[1] }' "$W/times0" "$W/times1")"
}

# wait_line FILE TEXT PID: waits until FILE holds TEXT, while PID lives.
# Under TCG the verifier takes seconds per program: the timed work starts
# only once spanprof says it is sampling.
wait_line() {
	i=0
	while ! grep -q "$2" "$1" 2>/dev/null; do
		kill -0 "$3" 2>/dev/null || return 1
		i=$((i + 1))
		[ $i -gt 1800 ] && return 1
		sleep 0.1
	done
}

# recorded NAME PID: waits for the recording PID and emits its log.
recorded() {
	wait "$2"
	rc=$?
	emit "$1.log" "$W/$1.log"
	return $rc
}

# On-CPU: the chain fixtures (gcc drops the leaf's frame pointer, clang
# keeps it) run one after the other, each busy in 80 ms windows it writes
# down, inside one recording that ends when both have exited.
oncpu() {
	t0=$(now)
	mkfifo "$W/go-gcc" "$W/go-clang"
	(read x <"$W/go-gcc"; exec "$R/chain-gcc" 3000 "$W/marks-gcc") >/dev/null &
	g=$!
	(read x <"$W/go-clang"; exec "$R/chain-clang" 3000 "$W/marks-clang") >/dev/null &
	c=$!
	"$R/spanprof" record --pid $g --pid $c --frequency $FREQ --duration 120s --output "$W/oncpu.otlp.json" 2>"$W/oncpu.log" &
	rec=$!
	if ! wait_line "$W/oncpu.log" "spanprof: recording" $rec; then
		kill $g $c 2>/dev/null
		recorded oncpu $rec
		result oncpu loaded=0
		return
	fi
	t1=$(now)
	run_timed "$W/go-gcc" $g cg
	run_timed "$W/go-clang" $c cc
	recorded oncpu $rec
	rc=$?
	result oncpu loaded=1 rc=$rc gcc=$g clang=$c cpu_gcc=$cg cpu_clang=$cc load_s=$(echo "$t0 $t1" | awk '{print $2-$1}')
	emit marks-gcc "$W/marks-gcc"
	emit marks-clang "$W/marks-clang"
	emit oncpu.otlp.json "$W/oncpu.otlp.json"
}

# OTEP 4947 correlation: the gcc workload with its TLS in the executable,
# two threads running spans, recorded for 4 s; it writes its ground truth
# on SIGTERM. Where the payload has a second library (x86-64), the
# workload dlopens it a second into the recording: the loader's hook must
# report the change (corr.log's closing line), and the executable's
# variable stays the one read.
correlation() {
	late=""
	if [ -f "$R/libtlsfill.so" ]; then
		late="$W/late-go"
		rm -f "$late"
		WL_LATE_LIB="$R/libtlsfill.so" WL_LATE_WHEN="$late" "$R/workload-gcc" "$W/truth-corr" 600 2 >"$W/workload.out" &
	else
		"$R/workload-gcc" "$W/truth-corr" 600 2 >"$W/workload.out" &
	fi
	w=$!
	"$R/spanprof" record --pid $w --frequency $CORR_FREQ --duration 4s --output "$W/corr.otlp.json" 2>"$W/corr.log" &
	rec=$!
	if [ -n "$late" ] && wait_line "$W/corr.log" "spanprof: recording" $rec; then
		sleep 1
		touch "$late"
	fi
	wait $rec
	rc=$?
	kill -TERM $w; wait $w
	emit corr.log "$W/corr.log"
	result correlation rc=$rc late=${late:+1}
	emit truth-corr "$W/truth-corr"
	emit corr.otlp.json "$W/corr.otlp.json"
}

# Live patching of kernel text: a do-nothing program attached to
# sched_switch and detached 300 times while a shell loop keeps both CPUs
# switching (test/kernels/flip). Each attach and detach patches
# __schedule's tracepoint site while the other CPU runs it: a guest whose
# emulator runs stale bytes (qemu's multi-threaded TCG on x86) hangs or
# oopses here, by name, not in a later off-CPU step at random.
patching() {
	( while :; do sleep 0.001; done ) >/dev/null 2>&1 &
	b=$!
	# FLIP_RUNS (SPANPROF_KERNEL_FLIP_RUNS) repeats the loop, a soak of
	# the patching: each run is FLIPS attaches and detaches, the first
	# failure ends it.
	runs=${FLIP_RUNS:-1} i=0 passed=0 rc=0 t0=$(now)
	: >"$W/flip.out"
	while [ $i -lt $runs ]; do
		i=$((i + 1))
		"$R/flip" ${FLIPS:-300} >"$W/flip.run" 2>&1
		rc=$?
		sed "s/^/run $i: /" "$W/flip.run" >>"$W/flip.out"
		[ $rc -ne 0 ] && break
		passed=$((passed + 1))
	done
	kill $b; wait $b 2>/dev/null
	emit flip.out "$W/flip.out"
	result patching rc=$rc runs=$runs passed=$passed total_s=$(echo "$t0 $(now)" | awk '{print $2-$1}') $(tail -n 1 "$W/flip.run")
}

# Dynamic TLS in the eBPF reader: the workload dlopens its context library
# after a 512-byte TLS library took glibc's static surplus, so every read
# walks the thread's DTV. Built for x86-64 only (the libraries are
# TLSDESC through -mtls-dialect=gnu2).
dtvcorrelation() {
	if [ ! -x "$R/workload-dlopen" ]; then
		result dtvcorrelation skipped=1
		return
	fi
	WL_CTX_LIB="$R/libwlctx.so" WL_TLS_FILL="$R/libtlsfill.so" "$R/workload-dlopen" "$W/truth-dtv" 600 2 >"$W/dtv.out" &
	w=$!
	"$R/spanprof" record --pid $w --frequency $CORR_FREQ --duration 4s --output "$W/dtv.otlp.json" 2>"$W/dtv.log"
	rc=$?
	kill -TERM $w; wait $w
	emit dtv.log "$W/dtv.log"
	result dtvcorrelation rc=$rc
	emit truth-dtv "$W/truth-dtv"
	emit dtv.otlp.json "$W/dtv.otlp.json"
}

# Goroutine-label correlation: the SDK-instrumented Go service, recorded
# for 4 s; it writes its ground truth on SIGTERM. On arm64 the eBPF
# program reads g from x28, on x86-64 from the thread pointer.
gocorrelation() {
	"$R/go-service" -duration 120s -out "$W/truth-go" -gomaxprocs 2 >"$W/go-service.out" 2>&1 &
	w=$!
	"$R/spanprof" record --pid $w --frequency $CORR_FREQ --duration 4s --output "$W/gocorr.otlp.json" 2>"$W/gocorr.log"
	rc=$?
	kill -TERM $w; wait $w
	emit gocorr.log "$W/gocorr.log"
	result gocorrelation rc=$rc
	emit truth-go "$W/truth-go"
	emit gocorr.otlp.json "$W/gocorr.otlp.json"
}

# Off-CPU: the spans fixture's sleeping, futex, pipe and ping-pong spans,
# started once spanprof records; the recording ends when it exits. Every
# wait is captured (threshold 1ns): the matrix checks the kernel's part,
# capture at switch-out and duration at switch-in, on each kernel; the
# sampled estimator's variance over the few spans an emulated machine runs
# would hide it (the host's e2e test judges the sampled mode).
offcpu() {
	mkfifo "$W/go-spans"
	# The shell holds the fifo open, so that the child opens its stdin at
	# once and execs spans, and the recording starts once spans has said
	# its pid: it must find spans, not the shell that forked it. Started
	# on the shell, the recording saw spans only at its exec, and its
	# first spans, before the trace-context scan of the new image, went
	# unlinked (about 130 ms of them under emulation).
	exec 3<>"$W/go-spans"
	"$R/spans" "$W/truth-offcpu" ${OFFCPU_SECONDS:-6} 2 <&3 >"$W/spans.out" &
	s=$!
	if ! wait_line "$W/spans.out" "^pid " $s; then
		exec 3>&-
		result offcpu loaded=0
		return
	fi
	"$R/spanprof" record --pid $s --off-cpu --off-cpu-threshold 1ns --duration 120s --output "$W/offcpu.otlp.json" 2>"$W/offcpu.log" &
	rec=$!
	if ! wait_line "$W/offcpu.log" "spanprof: recording" $rec; then
		kill $s 2>/dev/null
		exec 3>&-
		recorded offcpu $rec
		result offcpu loaded=0
		return
	fi
	echo go >&3
	exec 3>&-
	wait $s
	recorded offcpu $rec
	result offcpu loaded=1 rc=$?
	emit truth-offcpu "$W/truth-offcpu"
	emit offcpu.otlp.json "$W/offcpu.otlp.json"
}

# Exec and exit: a shell starts short-lived chain processes one after the
# other under a recording of the whole machine; each has exited long before
# the recording is symbolized.
execexit() {
	"$R/spanprof" record --all --frequency $FREQ --duration 120s --output "$W/exec.otlp.json" 2>"$W/exec.log" &
	rec=$!
	if ! wait_line "$W/exec.log" "spanprof: recording" $rec; then
		recorded exec $rec
		result exec loaded=0
		return
	fi
	pids=""
	for i in 1 2 3 4 5; do
		"$R/chain-clang" 300 "$W/marks-exec-$i" >/dev/null &
		pids="$pids,$!"
		wait $!
	done
	kill -INT $rec
	recorded exec $rec
	result exec loaded=1 rc=$? pids=${pids#,}
	for i in 1 2 3 4 5; do
		emit marks-exec-$i "$W/marks-exec-$i"
	done
	emit exec.otlp.json "$W/exec.otlp.json"
}

# The agent exporting OTLP/gRPC to the sink on loopback, while a chain
# fixture runs; SIGTERM makes it send its last profile.
agent() {
	mkdir -p "$W/sink"
	"$R/sink" -listen 127.0.0.1:4317 -dir "$W/sink" >"$W/sink.log" 2>&1 &
	sk=$!
	mkfifo "$W/go-agent"
	(read x <"$W/go-agent"; exec "$R/chain-gcc" 3000 "$W/marks-agent") >/dev/null &
	g=$!
	"$R/spanprof" agent --endpoint 127.0.0.1:4317 --insecure --report-interval 1s --frequency $FREQ --pid $g 2>"$W/agent.log" &
	ag=$!
	if ! wait_line "$W/agent.log" "agent started" $ag; then
		kill $g $sk 2>/dev/null
		wait $ag
		emit agent.log "$W/agent.log"
		result agent loaded=0
		return
	fi
	run_timed "$W/go-agent" $g cg
	sleep 2
	kill -TERM $ag
	wait $ag
	rc=$?
	kill -TERM $sk
	wait $sk
	emit agent.log "$W/agent.log"
	emit sink.log "$W/sink.log"
	result agent loaded=1 rc=$rc pid=$g cpu=$cg
	emit marks-agent "$W/marks-agent"
	for f in "$W"/sink/*.otlp.json; do
		[ -f "$f" ] && emit "sink/${f##*/}" "$f"
	done
}

# Hybrid unwinding (docs/kernels.md), where the payload has the fixture
# (the arm64 guest; the host's e2e test runs it on x86-64): testdata/unwind's cases (one
# thread per case, each in one function calling into glibc or libstdc++), built by gcc and by
# clang where the payload has them (arm64), both recorded on- and off-CPU
# in one recording that starts once both have written their threads, and
# they run once it has loaded.
unwind() {
	if [ ! -x "$R/cases-gcc" ]; then
		result unwind skipped=1
		return
	fi
	"$R/cases-gcc" ${UNWIND_FIXTURE_SECONDS:-600} "$W/threads-gcc" >"$W/cases-gcc.out" &
	g=$!
	"$R/cases-clang" ${UNWIND_FIXTURE_SECONDS:-600} "$W/threads-clang" >"$W/cases-clang.out" &
	c=$!
	if ! wait_line "$W/cases-gcc.out" "^pid " $g || ! wait_line "$W/cases-clang.out" "^pid " $c; then
		kill $g $c 2>/dev/null
		result unwind loaded=0
		return
	fi
	# Stopped while spanprof loads: 34 busy threads made the verifier's
	# loads take over 200 s under TCG, past the fixtures' run. A stop
	# before the recording is no wait it captures (that is at a switch-out).
	kill -STOP $g $c
	# spanprof records with a 64 MiB ring, at nice -19, and off-CPU
	# waits under 50 ms sampled by their length. The 34 threads keep
	# both virtual CPUs busy: at nice 0 the reader got about a tenth of
	# a CPU, read almost nothing while the recording ran and could not
	# drain the ring in the 10 s after it (at the default 2 ms the
	# waiting cases' threads gave about 4,500 records a second with an
	# 8 KiB window each). busybox has renice but no nice: the shell
	# takes -19 for the recording it starts, which inherits it with
	# every thread, and gives it back.
	reniced=""
	renice -n -19 -p $$ >/dev/null 2>&1 && reniced=1
	"$R/spanprof" record --pid $g --pid $c --off-cpu --off-cpu-threshold 50ms \
		--frequency ${UNWIND_FREQ:-199} --duration ${UNWIND_DURATION:-16s} \
		--ring-mib 64 --output "$W/unwind.otlp.json" 2>"$W/unwind.log" &
	rec=$!
	[ -n "$reniced" ] && renice -n 19 -p $$ >/dev/null 2>&1
	wait_line "$W/unwind.log" "spanprof: recording" $rec
	kill -CONT $g $c
	wait $rec
	rc=$?
	alive=1
	kill -0 $g 2>/dev/null && kill -0 $c 2>/dev/null || alive=0
	kill $g $c 2>/dev/null
	wait $g $c 2>/dev/null
	emit unwind.log "$W/unwind.log"
	result unwind loaded=1 rc=$rc gcc=$g clang=$c alive=$alive
	emit threads-gcc "$W/threads-gcc"
	emit threads-clang "$W/threads-clang"
	emit unwind.otlp.json "$W/unwind.otlp.json"
}

# children: the pids of the workload's programs this script started (the
# watchdog is a subshell: $$ is still the script's pid there).
children() {
	for p in /proc/[0-9]*; do
		st=$(cat "$p/stat" 2>/dev/null) || continue
		set -- $st
		[ "$4" = "$$" ] || continue
		case "$2" in
		"(spanprof)" | "(flip)" | "(insns)" | "(helpertest)" | "(spans)" | "(chain-gcc)" | "(chain-clang)" | "(workload-gcc)" | "(workload-dlopen)" | "(go-service)" | "(sink)" | "(cases-gcc)" | "(cases-clang)")
			echo "${p#/proc/}" ;;
		esac
	done
}

# insns: how many instructions the verifier processed for each program
# (test/kernels/insns); check_test.go holds them to bpf/verified-insns.txt.
insns() {
	"$R/insns" >"$W/insns.out" 2>&1
	rc=$?
	emit insns.out "$W/insns.out"
	result insns rc=$rc $(grep '^insns ' "$W/insns.out" | cut -d' ' -f2-)
}

# helpers: the BPF helpers' in-kernel tests (bpf/helpertest, run by
# BPF_PROG_TEST_RUN), their go test output kept as helpers.out.
helpers() {
	"$R/helpertest" -test.v -test.count=1 >"$W/helpers.out" 2>&1
	rc=$?
	emit helpers.out "$W/helpers.out"
	result helpers rc=$rc passed=$(grep -c '^--- PASS' "$W/helpers.out") failed=$(grep -c '^--- FAIL' "$W/helpers.out") skipped=$(grep -c '^--- SKIP' "$W/helpers.out")
}

# watchdog STEP SECONDS: a step that runs longer than SECONDS is stuck.
# The watchdog writes down what the workload's threads are doing (state,
# wait channel, system call, kernel stack) and the kernel's last messages,
# sends spanprof SIGQUIT (the Go runtime writes every goroutine's stack
# into the step's log) and kills the rest, so the step ends and the
# script goes on to the next one. A step still running a minute later is
# stuck beyond that: its dump goes to the console as it is.
watchdog() {
	sleep "$2" >/dev/null 2>&1
	d="$W/watchdog-$1"
	{
		echo "step $1 still running after $2 s (uptime $(now) s)"
		for p in $(children); do
			echo "--- pid $p $(cat /proc/$p/comm 2>/dev/null)"
			for t in /proc/$p/task/*; do
				set -- $(cat "$t/stat" 2>/dev/null)
				echo "tid ${t##*/} $2 state $3 wchan $(cat "$t/wchan" 2>/dev/null) syscall $(cut -d' ' -f1 "$t/syscall" 2>/dev/null)"
				sed 's/^/    /' "$t/stack" 2>/dev/null
			done
		done
		echo "--- memory"
		head -n 5 /proc/meminfo
		echo "--- kernel messages"
		dmesg 2>/dev/null | tail -n 40
	} >"$d.tmp" 2>&1
	mv "$d.tmp" "$d"
	for p in $(children); do
		[ "$(cat /proc/$p/comm 2>/dev/null)" = spanprof ] && kill -QUIT $p
	done
	sleep 5 >/dev/null 2>&1
	for p in $(children); do kill -KILL $p 2>/dev/null; done
	sleep 60 >/dev/null 2>&1
	echo "=== RESULT stuck-$1 seconds=$2 ended=0"
	cat "$d"
}

result start kernel=$(uname -r) arch=$(uname -m) btf=$([ -e /sys/kernel/btf/vmlinux ] && echo 1 || echo 0)
for step in ${STEPS:-patching insns helpers oncpu correlation dtvcorrelation gocorrelation offcpu execexit agent unwind}; do
	t0=$(now)
	secs=${STEP_SECONDS:-240}
	[ $step = patching ] && secs=$((secs * ${FLIP_RUNS:-1}))
	watchdog $step $secs &
	wd=$!
	$step
	kill $wd 2>/dev/null
	wait $wd 2>/dev/null
	if [ -f "$W/watchdog-$step" ]; then
		result stuck-$step seconds=$secs ended=1
		emit watchdog-$step "$W/watchdog-$step"
	fi
	result time step=$step s=$(echo "$t0 $(now)" | awk '{print $2-$1}')
done
# The perf interrupt's cost as the kernel judged it: it lowers the
# sample rate it allows when a sample takes too long, and throttles events.
result perf max_sample_rate=$(cat /proc/sys/kernel/perf_event_max_sample_rate 2>/dev/null) lowered=$(dmesg 2>/dev/null | grep -c "interrupt took too long") throttled=$(dmesg 2>/dev/null | grep -c "perf.*throttl")
result done
