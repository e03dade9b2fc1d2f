package tracectx

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// OTEP 4719 process context header: {char signature[8]; u32 version;
// u32 payload_size; u64 monotonic_published_at_ns; u64 payload_ptr}.
// Version 2 (as merged) carries an
// opentelemetry.proto.processcontext.v1development.ProcessContext{resource,
// attributes}
// payload; version 1, the development format some writers still publish,
// the same header with a bare Resource.
const (
	procCtxSignature  = "OTEL_CTX"
	procCtxHeaderSize = 32
	// procCtxRetryWait spaces the reads of a context being updated: a
	// writer's update is a few stores, so a millisecond sees it done.
	procCtxRetryWait = time.Millisecond
	// MaxProcessContextPayload bounds what the reader copies from a process.
	MaxProcessContextPayload = 1 << 20
	procCtxRetries           = 4
)

// Extra attribute keys the thread-context draft puts into the process
// context (OTEP 4947): how to interpret the record's attribute key bytes.
const (
	SchemaVersionKey   = "threadlocal.schema_version"
	AttributeKeyMapKey = "threadlocal.attribute_key_map"
)

// SchemaVersions are the threadlocal.schema_version values whose records
// this package reads: the layout of the SPEC's record table, named
// tlsdesc_v1_dev in the OTEP 4947 drafts and tls_v1 as merged (what the
// SDKs publish). A process context without one is read as that layout too.
var SchemaVersions = []string{SchemaTLS, SchemaTLSDraft}

// Schema versions of OTEP 4947 as merged and as drafted.
const (
	// SchemaTLS: the TLS record of the SPEC's table, as merged.
	SchemaTLS = "tls_v1"
	// SchemaTLSDraft: the same record, as the drafts named it.
	SchemaTLSDraft = "tlsdesc_v1_dev"
	// SchemaGoLabels: a Go process whose thread context is its
	// goroutines' pprof labels; it has no record and no key map (the
	// labels carry their keys).
	SchemaGoLabels = "go_pprof_labels_v1"
)

// Errors of the process-context reader.
var (
	// ErrNoProcessContext: no OTEL_CTX mapping with a valid header.
	ErrNoProcessContext = errors.New("no process context")
	// ErrProcessContextBusy: the publisher kept updating while we read.
	ErrProcessContextBusy = errors.New("process context changed while reading")
	// ErrBadPayload: the payload is not a ProcessContext protobuf.
	ErrBadPayload = errors.New("process context payload malformed")
)

// ProcessContext is a decoded OTEP 4719 payload.
type ProcessContext struct {
	// PublishedAtNs is the header's monotonic_published_at_ns
	// (CLOCK_BOOTTIME in version 2; only its changes mean anything).
	PublishedAtNs uint64
	// Version is the header's version, 1 or 2.
	Version uint32
	// Addr is the header's address in the process.
	Addr uint64
	// Resource holds ProcessContext.resource.attributes; non-string values
	// are rendered as text.
	Resource map[string]string
	// Extra holds ProcessContext.extra_attributes other than the key map.
	Extra map[string]string
	// AttributeKeyMap names thread-context attribute keys by index.
	AttributeKeyMap []string
}

// KeyMap returns the attribute key map when the process context's
// threadlocal.schema_version is one this package reads (or absent), and an
// error otherwise: another record layout's key bytes may mean something
// else, so none is named then (the ids are read all the same).
func (pc *ProcessContext) KeyMap() ([]string, error) {
	v, ok := pc.Extra[SchemaVersionKey]
	if v == SchemaGoLabels {
		return nil, nil // no record: the goroutine labels name their keys
	}
	if ok && !slices.Contains(SchemaVersions, v) {
		return nil, fmt.Errorf("read process context: %s %q not supported (want one of %q): thread attributes not exported",
			SchemaVersionKey, v, SchemaVersions)
	}
	return pc.AttributeKeyMap, nil
}

// ReadProcessContext returns the resource attributes a process published
// with the OTEP 4719 process context. It returns ErrNoProcessContext when the
// process publishes none.
func ReadProcessContext(pid int) (map[string]string, error) {
	pc, err := LoadProcessContext(pid)
	if err != nil {
		return nil, err
	}
	return pc.Resource, nil
}

// LoadProcessContext finds the OTEL_CTX mapping in /proc/PID/maps, reads the
// header and payload from /proc/PID/mem with the OTEP's retry protocol, and
// decodes it.
func LoadProcessContext(pid int) (*ProcessContext, error) {
	maps, err := readMaps(pid)
	if err != nil {
		return nil, err
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		return nil, fmt.Errorf("open process memory: %w", err)
	}
	defer mem.Close()
	return loadProcessContext(mem, maps)
}

// ReadContextPublishedAt reads the monotonic_published_at_ns of the
// process context whose header is at addr in pid (ProcessInfo's
// ContextAddr): one 32-byte read, so that a reader can tell an update
// (a changed value) without reading the payload. 0 means an update is
// under way; ErrNoProcessContext, that addr holds no header any more.
func ReadContextPublishedAt(pid int, addr uint64) (uint64, error) {
	mem, err := openProcMem(pid)
	if err != nil {
		return 0, fmt.Errorf("open process memory: %w", err)
	}
	defer mem.Close()
	var hdr [procCtxHeaderSize]byte
	if _, err := mem.ReadAt(hdr[:], int64(addr)); err != nil {
		return 0, fmt.Errorf("read process context header at %#x: %w", addr, err)
	}
	if string(hdr[0:8]) != procCtxSignature {
		return 0, fmt.Errorf("process context at %#x: bad signature: %w", addr, ErrNoProcessContext)
	}
	return binary.NativeEndian.Uint64(hdr[16:24]), nil
}

func isProcCtxMapping(path string) bool {
	return strings.HasPrefix(path, "/memfd:OTEL_CTX") ||
		strings.HasPrefix(path, "[anon:OTEL_CTX]") ||
		strings.HasPrefix(path, "[anon_shmem:OTEL_CTX]")
}

func loadProcessContext(mem io.ReaderAt, maps []mapping) (*ProcessContext, error) {
	var errs []error
	for _, m := range maps {
		if !isProcCtxMapping(m.path) || m.end-m.start < procCtxHeaderSize {
			continue
		}
		pc, err := readProcessContextAt(mem, m.start)
		if err == nil {
			return pc, nil
		}
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return nil, ErrNoProcessContext
	}
	return nil, errors.Join(errs...)
}

func readProcessContextAt(mem io.ReaderAt, addr uint64) (*ProcessContext, error) {
	var hdr [procCtxHeaderSize]byte
	for i := range procCtxRetries {
		if i > 0 {
			time.Sleep(procCtxRetryWait)
		}
		if _, err := mem.ReadAt(hdr[:], int64(addr)); err != nil {
			return nil, fmt.Errorf("read process context header at %#x: %w", addr, err)
		}
		if string(hdr[0:8]) != procCtxSignature {
			return nil, fmt.Errorf("process context at %#x: bad signature: %w", addr, ErrNoProcessContext)
		}
		version := binary.NativeEndian.Uint32(hdr[8:12])
		if version != 1 && version != 2 {
			return nil, fmt.Errorf("process context at %#x: version %d not supported (1, 2): %w", addr, version, ErrNoProcessContext)
		}
		size := binary.NativeEndian.Uint32(hdr[12:16])
		published := binary.NativeEndian.Uint64(hdr[16:24])
		ptr := binary.NativeEndian.Uint64(hdr[24:32])
		if published == 0 {
			continue // update in progress
		}
		if size > MaxProcessContextPayload {
			return nil, fmt.Errorf("process context at %#x: payload of %d bytes: %w", addr, size, ErrBadPayload)
		}
		payload := make([]byte, size)
		if _, err := mem.ReadAt(payload, int64(ptr)); err != nil {
			continue // a racing update may have freed the old payload
		}
		var again [8]byte
		if _, err := mem.ReadAt(again[:], int64(addr)+16); err != nil {
			return nil, fmt.Errorf("re-read process context header at %#x: %w", addr, err)
		}
		if binary.NativeEndian.Uint64(again[:]) != published {
			continue
		}
		decode := DecodeProcessContext
		if version == 1 {
			decode = DecodeResource
		}
		pc, err := decode(payload)
		if err != nil {
			return nil, err
		}
		pc.PublishedAtNs, pc.Version, pc.Addr = published, version, addr
		return pc, nil
	}
	return nil, fmt.Errorf("process context at %#x: %w", addr, ErrProcessContextBusy)
}

// DecodeResource decodes the payload of a version 1 process context, a
// bare opentelemetry.proto.resource.v1.Resource { repeated KeyValue
// attributes = 1; ... }; it carries no thread-context key map.
func DecodeResource(b []byte) (*ProcessContext, error) {
	// A ProcessContext whose field 1 is this Resource.
	return DecodeProcessContext(protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), b))
}

// DecodeProcessContext decodes a ProcessContext protobuf:
//
//	ProcessContext { Resource resource = 1; repeated KeyValue extra_attributes = 2; }
//	Resource { repeated KeyValue attributes = 1; ... }
//
// Unknown fields are skipped, as protobuf evolution requires.
func DecodeProcessContext(b []byte) (*ProcessContext, error) {
	pc := &ProcessContext{Resource: map[string]string{}, Extra: map[string]string{}}
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			return eachField(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
				if num != 1 || typ != protowire.BytesType {
					return nil
				}
				k, val, _, err := decodeKeyValue(v, 0)
				if err != nil {
					return err
				}
				pc.Resource[k] = val
				return nil
			})
		case num == 2 && typ == protowire.BytesType:
			k, val, arr, err := decodeKeyValue(v, 0)
			if err != nil {
				return err
			}
			if k == AttributeKeyMapKey {
				pc.AttributeKeyMap = arr
			} else {
				pc.Extra[k] = val
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("decode process context: %w", err)
	}
	return pc, nil
}

// eachField calls fn with every field of message b; fixed-width and varint
// values are passed as their raw bytes.
func eachField(b []byte, fn func(protowire.Number, protowire.Type, []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("tag: %w: %w", protowire.ParseError(n), ErrBadPayload)
		}
		b = b[n:]
		var v []byte
		if typ == protowire.BytesType {
			v, n = protowire.ConsumeBytes(b)
		} else {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n >= 0 {
				v = b[:n]
			}
		}
		if n < 0 {
			return fmt.Errorf("field %d: %w: %w", num, protowire.ParseError(n), ErrBadPayload)
		}
		b = b[n:]
		if err := fn(num, typ, v); err != nil {
			return err
		}
	}
	return nil
}

// decodeKeyValue decodes KeyValue{string key = 1; AnyValue value = 2}. arr
// holds the elements when the value is an array.
func decodeKeyValue(b []byte, depth int) (key, val string, arr []string, err error) {
	err = eachField(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			key = string(v)
		case num == 2 && typ == protowire.BytesType:
			var e error
			val, arr, e = decodeAnyValue(v, depth)
			return e
		}
		return nil
	})
	return key, val, arr, err
}

// decodeAnyValue renders AnyValue as text: string 1, bool 2, int 3,
// double 4, array 5, kvlist 6, bytes 7.
func decodeAnyValue(b []byte, depth int) (val string, arr []string, err error) {
	if depth > 8 {
		return "", nil, fmt.Errorf("AnyValue nested deeper than 8: %w", ErrBadPayload)
	}
	err = eachField(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			val = string(v)
		case num == 2 && typ == protowire.VarintType:
			x, _ := protowire.ConsumeVarint(v)
			val = strconv.FormatBool(x != 0)
		case num == 3 && typ == protowire.VarintType:
			x, _ := protowire.ConsumeVarint(v)
			val = strconv.FormatInt(int64(x), 10)
		case num == 4 && typ == protowire.Fixed64Type:
			x, _ := protowire.ConsumeFixed64(v)
			val = strconv.FormatFloat(math.Float64frombits(x), 'g', -1, 64)
		case num == 5 && typ == protowire.BytesType:
			arr = []string{}
			e := eachField(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
				if num != 1 || typ != protowire.BytesType {
					return nil
				}
				s, _, err := decodeAnyValue(v, depth+1)
				arr = append(arr, s)
				return err
			})
			val = "[" + strings.Join(arr, ",") + "]"
			return e
		case num == 6 && typ == protowire.BytesType:
			var kvs []string
			e := eachField(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
				if num != 1 || typ != protowire.BytesType {
					return nil
				}
				k, s, _, err := decodeKeyValue(v, depth+1)
				kvs = append(kvs, k+"="+s)
				return err
			})
			val = "{" + strings.Join(kvs, ",") + "}"
			return e
		case num == 7 && typ == protowire.BytesType:
			val = hex.EncodeToString(v)
		}
		return nil
	})
	return val, arr, err
}
