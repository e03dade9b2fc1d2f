// Package debuginfodtest runs a real debuginfod server (elfutils) for
// tests. debuginfod 0.188 cannot bind to loopback only, so the server
// runs in a network namespace of its own that has nothing but a loopback
// interface; HTTPClient dials into that namespace, and NetNS is the path
// for `nsenter --net=` when a child process (spanprof record) needs to
// reach it.
package debuginfodtest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spanprof/spanprof/internal/testutil"
)

// Server is a running debuginfod.
type Server struct {
	// URL is the server's address inside its namespace.
	URL string
	// NetNS is /proc/PID/ns/net of the server.
	NetNS string
	// HTTPClient reaches the server.
	HTTPClient *http.Client
}

// Start serves the debug files under dir and waits until the build IDs in
// want are indexed. It skips the test when debuginfod or root is missing.
func Start(t testing.TB, dir string, want ...string) *Server {
	t.Helper()
	if _, err := exec.LookPath("debuginfod"); err != nil {
		t.Skip("debuginfod not installed (Debian package debuginfod)")
	}
	testutil.RequireRoot(t, "needs root for a network namespace of the debuginfod server")
	db := filepath.Join(t.TempDir(), "db.sqlite")
	script := "ip link set lo up && exec debuginfod -F -p 8002 -d " + db + " -t 0 -g 0 " + dir
	cmd := exec.Command("unshare", "--net", "--", "sh", "-c", script)
	logf, err := os.CreateTemp(t.TempDir(), "debuginfod-*.log")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start debuginfod: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	s := &Server{
		URL:   "http://127.0.0.1:8002",
		NetNS: fmt.Sprintf("/proc/%d/ns/net", cmd.Process.Pid),
	}
	s.HTTPClient = &http.Client{Transport: &http.Transport{DialContext: s.dial}}
	// Wait for the namespace (unshare execs sh, which execs debuginfod,
	// all the same pid), then for the scan to index every build ID.
	deadline := time.Now().Add(2 * time.Minute)
	for _, id := range want {
		for {
			resp, err := s.HTTPClient.Get(s.URL + "/buildid/" + id + "/debuginfo")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Now().After(deadline) {
				log, _ := os.ReadFile(logf.Name())
				t.Fatalf("debuginfod did not index %s: last error %v\n%s", id, err, log)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return s
}

// dial connects from inside the server's network namespace. The socket is
// made on a thread moved into the namespace; that thread is never handed
// back to the Go scheduler (the goroutine exits locked), so no other code
// runs in the wrong namespace.
func (s *Server) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		ns, err := os.Open(s.NetNS)
		if err != nil {
			ch <- result{err: fmt.Errorf("open netns: %w", err)}
			return
		}
		defer ns.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{err: fmt.Errorf("enter netns: %w", err)}
			return
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}
