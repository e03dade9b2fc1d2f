package chstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/web/live"
)

// chdbConn runs the store's SQL on chDB, the current ClickHouse engine
// in process (pinned in the Makefile, make clickhouse-deps), through a
// small Python bridge. Inserts go through the file() table function
// with the same RowBinary rows the HTTP interface takes.
type chdbConn struct {
	mu  sync.Mutex
	in  io.WriteCloser
	out io.Reader
	dir string
	n   int
}

func chdbPython(t *testing.T) string {
	if p := os.Getenv("SPANPROF_CHDB_PYTHON"); p != "" {
		return p
	}
	p, _ := filepath.Abs("../../../../out/chdb/venv/bin/python")
	if _, err := os.Stat(p); err != nil {
		t.Skip("skip: no chDB venv at " + p + " (make clickhouse-deps)")
	}
	return p
}

func startChdb(t *testing.T) *chdbConn {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command(chdbPython(t), "testdata/chdb_bridge.py", filepath.Join(dir, "db"))
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); _ = cmd.Wait() })
	return &chdbConn{in: in, out: out, dir: dir}
}

func (c *chdbConn) call(op byte, sql string) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	msg := append([]byte{op}, binary.LittleEndian.AppendUint32(nil, uint32(len(sql)))...)
	if _, err := c.in.Write(append(msg, sql...)); err != nil {
		return nil, err
	}
	head := make([]byte, 5)
	if _, err := io.ReadFull(c.out, head); err != nil {
		return nil, err
	}
	data := make([]byte, binary.LittleEndian.Uint32(head[1:]))
	if _, err := io.ReadFull(c.out, data); err != nil {
		return nil, err
	}
	if head[0] != 0 {
		return nil, fmt.Errorf("%w: chdb: %s", ErrServer, data)
	}
	return data, nil
}

func (c *chdbConn) Exec(_ context.Context, sql string) error {
	_, err := c.call('E', sql)
	return err
}

func (c *chdbConn) Query(_ context.Context, sql string) ([]byte, error) { return c.call('Q', sql) }

func (c *chdbConn) Insert(_ context.Context, table string, cols []column, rows []byte) error {
	c.mu.Lock()
	c.n++
	f := filepath.Join(c.dir, fmt.Sprintf("rows%d.bin", c.n))
	c.mu.Unlock()
	if err := os.WriteFile(f, rows, 0o644); err != nil {
		return err
	}
	defer os.Remove(f)
	names := make([]string, len(cols))
	structure := make([]string, len(cols))
	for i, col := range cols {
		names[i] = col.name
		structure[i] = col.name + " " + col.typ
	}
	esc := strings.ReplaceAll(strings.Join(structure, ", "), "'", `\'`)
	return c.Exec(context.Background(), "INSERT INTO "+table+" ("+strings.Join(names, ", ")+") SELECT * FROM file('"+f+"', 'RowBinary', '"+esc+"')")
}

// TestChdbSameSQL runs the store's DDL, inserts and queries unchanged on
// a current ClickHouse engine and checks the answers against the
// in-memory window, as TestSameAsWindow does on 18.16.
func TestChdbSameSQL(t *testing.T) {
	conn := startChdb(t)
	v, err := conn.Query(context.Background(), "SELECT version()")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("chDB engine %s", (&dec{b: v}).str())
	target := Target{Base: "chdb", Database: "cur"}
	mk := func() *Store {
		s := New(conn, target, Options{}, quiet)
		if err := s.EnsureSchema(context.Background()); err != nil {
			t.Fatal(err)
		}
		return s
	}
	a, b := mk(), mk()
	t0 := time.Now().Add(-time.Hour).Truncate(time.Millisecond).UTC()
	spans, profs := input(t0)
	mem := live.NewStore(live.Limits{})
	mem.AddSpans(spans)
	for _, p := range profs {
		mem.AddProfile(p)
	}
	a.AddSpans(spans)
	a.AddProfile(profs[0])
	b.AddProfile(profs[0])
	b.AddProfile(profs[1])
	for _, s := range []*Store{a, b} {
		if err := s.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	sameViews(t, mem, b, traceID, spans)
	if err := conn.Exec(context.Background(), "OPTIMIZE TABLE cur.spanprof_samples FINAL"); err != nil {
		t.Fatal(err)
	}
	sameViews(t, mem, a, traceID, spans)
	a.refreshCounts(context.Background())
	if st := a.Stats(); st.Samples != len(profs[0].Samples)+len(profs[1].Samples) || st.Traces != 1 {
		t.Errorf("stats after merge: %d samples, %d traces", st.Samples, st.Traces)
	}
	// Retention: a day five days back goes, today stays.
	_, old := input(time.Now().AddDate(0, 0, -5).UTC())
	a.AddProfile(old[0])
	if err := a.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	a.opts.RetentionDays = 2
	if err := a.dropExpired(context.Background()); err != nil {
		t.Fatalf("drop expired partitions: %v", err)
	}
	out, err := conn.Query(context.Background(), "SELECT toUInt64(count(DISTINCT toDate(toDateTime(intDiv(TimeUnixNano, 1000000000))))) FROM cur.spanprof_samples")
	if err != nil || len(out) != 8 {
		t.Fatalf("count days: %v", err)
	}
	if n := (&dec{b: out}).u64(); n != 1 {
		t.Errorf("%d days of samples after retention, want 1", n)
	}
}
