package chstore

import (
	"strings"
)

type column struct{ name, typ string }

// table is one table the store creates. The SQL sticks to what
// ClickHouse 18.16 accepts (no Map, no DateTime64, no TTL, no codecs,
// no LowCardinality) and current releases still do; column names follow
// the collector-contrib clickhouseexporter's otel_traces and
// otel_profiles where they mean the same (TraceId, SpanId, ParentSpanId,
// SpanName, SpanKind, ServiceName, Duration, StatusCode, StackHash,
// Addresses, FunctionNames, FileNames, LineNumbers, MappingFileNames).
type table struct {
	name   string
	cols   []column
	engine string
}

// day is the partition key of a column of Unix nanoseconds: retention
// drops whole days.
const day = "toYYYYMMDD(toDateTime(intDiv(TimeUnixNano, 1000000000)))"

// samplesTable holds a row per profile event. Sorted by trace and span
// first, so one trace is a narrow read of the primary key; then by host,
// process and thread, so the time and stack columns of one thread sit
// together and compress. BatchId (a hash of the export's rows) and Seq
// (the row's place in it) make a retried export's rows identical to the
// first copy's: ReplacingMergeTree folds them when parts merge, and
// readers skip a (BatchId, Seq) seen twice before that.
var samplesTable = table{
	name: "spanprof_samples",
	cols: []column{
		{"TimeUnixNano", "UInt64"},
		{"TraceId", "String"},
		{"SpanId", "String"},
		{"ServiceName", "String"},
		{"HostName", "String"},
		{"ProcessPid", "UInt32"},
		{"ProcessExecutableName", "String"},
		{"ThreadId", "UInt32"},
		{"ThreadName", "String"},
		{"Kind", "Enum8('on_cpu' = 0, 'off_cpu' = 1)"},
		{"ThreadState", "String"},
		{"OffCpuReason", "String"},
		{"Value", "Int64"},
		{"Period", "Int64"},
		{"StackHash", "UInt64"},
		{"SampleAttributeKeys", "Array(String)"},
		{"SampleAttributeValues", "Array(String)"},
		{"BatchId", "UInt64"},
		{"Seq", "UInt32"},
	},
	engine: "ReplacingMergeTree() PARTITION BY " + day +
		" PRIMARY KEY (TraceId, SpanId) ORDER BY (TraceId, SpanId, HostName, ProcessPid, ThreadId, TimeUnixNano, BatchId, Seq)" +
		" SETTINGS index_granularity = 8192",
}

// stacksTable holds each distinct stack once a day, by hash: frames leaf
// first, one array element per frame. A stack is written again the
// first time a day's samples use it, so dropping an old day's partition
// never takes a stack that newer samples need.
var stacksTable = table{
	name: "spanprof_stacks",
	cols: []column{
		{"StackHash", "UInt64"},
		{"Day", "Date"},
		{"Addresses", "Array(UInt64)"},
		{"FunctionNames", "Array(String)"},
		{"FileNames", "Array(String)"},
		{"LineNumbers", "Array(Int32)"},
		// FrameFlags: 1 inlined, 2 no symbol (named from .eh_frame),
		// 4 has a mapping, 8 kernel mapping, 16 MappingBuildIds holds
		// the file's content hash (it has no GNU build ID).
		{"FrameFlags", "Array(UInt8)"},
		{"MappingFileNames", "Array(String)"},
		{"MappingBuildIds", "Array(String)"},
		{"MappingStarts", "Array(UInt64)"},
		{"MappingLimits", "Array(UInt64)"},
		{"MappingOffsets", "Array(UInt64)"},
	},
	engine: "ReplacingMergeTree() PARTITION BY toYYYYMMDD(Day) ORDER BY StackHash SETTINGS index_granularity = 1024",
}

// spansTable holds exported spans, one row per span after merges (the
// latest copy wins, as in the in-memory window). Timestamp is the start
// in seconds, as DateTime: 18.16 has no DateTime64, so the nanoseconds
// are StartTimeUnixNano and Duration.
var spansTable = table{
	name: "spanprof_spans",
	cols: []column{
		{"Timestamp", "DateTime"},
		{"StartTimeUnixNano", "UInt64"},
		{"TraceId", "String"},
		{"SpanId", "String"},
		{"ParentSpanId", "String"},
		{"SpanName", "String"},
		{"SpanKind", "String"},
		{"ServiceName", "String"},
		{"Duration", "UInt64"},
		{"StatusCode", "String"},
		{"ReceivedUnixNano", "UInt64"},
	},
	engine: "ReplacingMergeTree(ReceivedUnixNano) PARTITION BY toYYYYMMDD(Timestamp) ORDER BY (TraceId, SpanId) SETTINGS index_granularity = 8192",
}

var tables = []table{samplesTable, stacksTable, spansTable}

func (t table) ddl(db string) string {
	var b strings.Builder
	b.WriteString("CREATE TABLE IF NOT EXISTS " + db + "." + t.name + " (")
	for i, c := range t.cols {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(c.name + " " + c.typ)
	}
	b.WriteString(") ENGINE = " + t.engine)
	return b.String()
}

// schema is every statement that creates the store in db, in order.
func schema(db string) []string {
	out := []string{"CREATE DATABASE IF NOT EXISTS " + db}
	for _, t := range tables {
		out = append(out, t.ddl(db))
	}
	return out
}
