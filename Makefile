# spanprof build, test and demo. Run as root: the tests load eBPF programs.
SHELL := /bin/bash
GO ?= $(shell command -v go 2>/dev/null || echo /usr/local/go/bin/go)
export PATH := $(dir $(GO)):$(PATH)
CLANG ?= clang-19
BIN := bin/spanprof
OUT := out

# Debian packages the build, tests and demo need; installed when missing.
# chromium drives the web UI tests; the rest build eBPF objects and fixtures.
APT_PACKAGES := clang-19 llvm-19 libbpf-dev gcc make binutils chromium
# Peers measured side by side by `make bench`.
BENCH_PACKAGES := linux-perf bpftrace libbpf-tools bpftool

.PHONY: all build generate check-generated deps bench-deps test vet demo bench clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/spanprof

deps:
	@if ! command -v $(CLANG) >/dev/null || [ ! -f /usr/include/bpf/bpf_helpers.h ] || ! command -v chromium >/dev/null; then \
		echo "installing $(APT_PACKAGES)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(APT_PACKAGES); \
	fi

bench-deps: deps
	@if ! command -v bpftrace >/dev/null || ! command -v perf >/dev/null || [ ! -x /usr/sbin/offcputime ]; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(BENCH_PACKAGES); \
	fi

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

test: deps check-generated vet
	$(GO) test -count=1 -timeout 30m ./...
	cd sdk/go && $(GO) vet ./... && $(GO) test -count=1 ./...

demo: deps build
	$(MAKE) -C testdata/fixtures
	@mkdir -p $(OUT)
	./testdata/fixtures/build/chain-gcc 6000 $(OUT)/demo-marks.txt > /dev/null & \
	pid=$$!; sleep 0.2; \
	./$(BIN) record --pid $$pid --frequency 999 --duration 5s --output $(OUT)/demo.folded && \
	./$(BIN) record --pid $$pid --frequency 999 --duration 0.5s --output $(OUT)/demo.pb.gz; \
	wait $$pid; true
	./$(BIN) record --frequency 99 --duration 2s
	@echo "flame-graph input: $(OUT)/demo.folded; pprof: go tool pprof -top $(OUT)/demo.pb.gz"

clean:
	rm -rf bin $(OUT)
	$(MAKE) -C testdata/fixtures clean
