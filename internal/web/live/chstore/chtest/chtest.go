// Package chtest runs a real clickhouse-server for tests: on loopback,
// on a free port, with its data in a test's temporary directory.
package chtest

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Server is a clickhouse-server the test started.
type Server struct {
	// HTTP is the HTTP interface's host:port.
	HTTP string
	dir  string
	bin  string
	cmd  *exec.Cmd
	t    testing.TB
}

// Binary finds clickhouse-server (Debian's package puts it in /usr/sbin).
func Binary() (string, error) {
	if p, err := exec.LookPath("clickhouse-server"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/clickhouse-server"); err == nil {
		return "/usr/sbin/clickhouse-server", nil
	}
	return "", fmt.Errorf("clickhouse-server not installed (make clickhouse-deps)")
}

const config = `<yandex>
  <logger><level>warning</level><console>1</console></logger>
  <http_port>%d</http_port>
  <tcp_port>%d</tcp_port>
  <listen_host>127.0.0.1</listen_host>
  <path>%[3]s/data/</path>
  <tmp_path>%[3]s/tmp/</tmp_path>
  <user_files_path>%[3]s/user_files/</user_files_path>
  <format_schema_path>%[3]s/format_schemas/</format_schema_path>
  <users_config>users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <mark_cache_size>268435456</mark_cache_size>
  <compression><case><method>zstd</method></case></compression>
</yandex>
`

const users = `<yandex>
  <profiles><default></default></profiles>
  <users><default><password></password><networks><ip>127.0.0.1</ip></networks><profile>default</profile><quota>default</quota></default></users>
  <quotas><default></default></quotas>
</yandex>
`

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// Start runs a server, skipping the test when clickhouse-server is not
// installed. It is stopped when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	if _, err := Binary(); err != nil {
		t.Skip("skip: " + err.Error())
	}
	s, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s.t = t
	t.Cleanup(s.Down)
	s.Up()
	return s
}

// New prepares a server with its data under dir, on free loopback
// ports; Start (or, outside tests, StartServer) runs it.
func New(dir string) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	hp, err := freePort()
	if err != nil {
		return nil, err
	}
	tp, err := freePort()
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.xml"), []byte(fmt.Sprintf(config, hp, tp, dir)), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "users.xml"), []byte(users), 0o644); err != nil {
		return nil, err
	}
	return &Server{HTTP: fmt.Sprintf("127.0.0.1:%d", hp), dir: dir, bin: bin}, nil
}

// URL is the --store value of database db.
func (s *Server) URL(db string) string { return "clickhouse://" + s.HTTP + "/" + db }

// Up starts the server (again) on the same port and data, failing the
// test if it does not answer.
func (s *Server) Up() {
	s.t.Helper()
	if err := s.StartServer(); err != nil {
		s.t.Fatal(err)
	}
}

// StartServer starts the server and waits until it answers.
func (s *Server) StartServer() error {
	if s.cmd != nil {
		return nil
	}
	log, err := os.OpenFile(filepath.Join(s.dir, "server.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(s.bin, "--config-file="+filepath.Join(s.dir, "config.xml"))
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	log.Close()
	if err != nil {
		return fmt.Errorf("start clickhouse-server: %w", err)
	}
	s.cmd = cmd
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get("http://" + s.HTTP + "/ping")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
			return fmt.Errorf("clickhouse-server not answering on %s within 30s: %s", s.HTTP, lastLines(string(b), 20))
		}
	}
}

// Down kills the server, as a crash or a lost node would (a clean
// shutdown of 18.16 waits about 10 s for idle HTTP connections).
func (s *Server) Down() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Pid is the running server's process id (0 when down).
func (s *Server) Pid() int {
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Query runs sql over HTTP and returns the answer (TabSeparated unless
// sql names a format).
func (s *Server) Query(sql string) (string, error) {
	resp, err := http.Post("http://"+s.HTTP+"/", "text/plain", strings.NewReader(sql))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("clickhouse: %s: %s", resp.Status, strings.TrimSpace(b.String()))
	}
	return b.String(), nil
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
