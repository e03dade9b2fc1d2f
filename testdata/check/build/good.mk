# Frame pointers through a composed variable, build ID, a BPF compile that
# needs no frame pointers, and a Go build.
FP_FLAGS := -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer
CFLAGS ?= -O2 -g $(FP_FLAGS)
CXXFLAGS = -O2 $(FP_FLAGS)
LDFLAGS += -Wl,--build-id=sha1

prog: prog.c
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $<

probe.bpf.o: probe.bpf.c
	clang-19 -O2 -g -target bpf -c $< -o $@

spanprof:
	go build -trimpath ./cmd/spanprof
