package sampler

import (
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/cilium/ebpf"

	"github.com/spanprof/spanprof/bpf"
)

// otelSpanCtxSize is the part of a traces_ctx_v1 value the programs read:
// trace_id[16], span_id[8] (struct otel_span_ctx in sampler.bpf.c).
const otelSpanCtxSize = 24

// useOTelMap makes the programs read the OTel eBPF Instrumentation's
// traces_ctx_v1 map pinned at pin ("" is OTelTracesMapPin) in place of the
// empty stand-in, and returns it for the caller to close after the load;
// nil when none is pinned. The definition is the pinned map's own: its
// max_entries and flags are the instrumentation's choice (and differ
// between its versions), and the load requires the replacement to match
// the spec exactly. A map whose key or value cannot be the span map
// (another layout) is left alone with a warning rather than failing the
// sampler.
func useOTelMap(spec *ebpf.CollectionSpec, opts *ebpf.CollectionOptions, pin string, log *slog.Logger) (*ebpf.Map, error) {
	if pin == "" {
		pin = OTelTracesMapPin
	}
	m, err := ebpf.LoadPinnedMap(pin, &ebpf.LoadPinOptions{ReadOnly: true})
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		log.Warn("the OTel instrumentation map is pinned but cannot be opened; its trace context is not read", "pin", pin, "error", err)
		return nil, nil
	}
	info, err := m.Info()
	if err != nil {
		m.Close()
		log.Warn("the OTel instrumentation map's definition cannot be read; its trace context is not read", "pin", pin, "error", err)
		return nil, nil
	}
	if (info.Type != ebpf.LRUHash && info.Type != ebpf.Hash) || info.KeySize != 8 || info.ValueSize < otelSpanCtxSize {
		m.Close()
		log.Warn("the pinned traces_ctx_v1 map is not a span map (want a hash keyed by pid_tgid with trace_id[16] span_id[8] first); its trace context is not read",
			"pin", pin, "type", info.Type, "key_size", info.KeySize, "value_size", info.ValueSize)
		return nil, nil
	}
	ms := spec.Maps[bpf.SamplerMapTracesCtxV1]
	ms.Type, ms.KeySize, ms.ValueSize = info.Type, info.KeySize, info.ValueSize
	ms.MaxEntries, ms.Flags = info.MaxEntries, info.Flags
	// The value's BTF is the 24-byte stand-in's: it describes no map that
	// is created, and would contradict a larger value.
	ms.Key, ms.Value = nil, nil
	opts.MapReplacements = map[string]*ebpf.Map{bpf.SamplerMapTracesCtxV1: m}
	if err := spec.Variables[bpf.SamplerVarOtelMap].Set(uint8(1)); err != nil {
		m.Close()
		return nil, fmt.Errorf("set otel_map: %w", err)
	}
	log.Info("reading trace context from the OTel instrumentation map", "pin", pin,
		"max_entries", info.MaxEntries, "value_size", info.ValueSize)
	return m, nil
}
