package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// bigGoPackages × bigGoFuncs generated functions of bigGoBlocks blocks
// each make a Go executable of over 100 MB unstripped (text, pclntab and
// DWARF), whose functions fill its whole text.
const (
	bigGoPackages = 68
	bigGoFuncs    = 1000
	bigGoBlocks   = 24
)

// buildBigGo writes and builds the big Go program into dir (kept between
// runs: the build takes minutes) and returns its path. The program calls
// functions picked over the whole table, then sleeps, so that a few per
// cent of a core run code anywhere in its text and the agent's samples
// name functions from all over the binary.
func buildBigGo(dir string) (string, error) {
	bin := filepath.Join(dir, "biggo")
	if st, err := os.Stat(bin); err == nil && st.Size() > 100<<20 {
		return bin, nil
	}
	src := filepath.Join(dir, "src")
	if err := os.RemoveAll(src); err != nil {
		return "", err
	}
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", err
	}
	write := func(name, body string) error {
		p := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		return os.WriteFile(p, []byte(body), 0o644)
	}
	if err := write("go.mod", "module biggo\n\ngo 1.22\n"); err != nil {
		return "", err
	}
	var mainSrc strings.Builder
	mainSrc.WriteString("package main\n\nimport (\n\t\"fmt\"\n\t\"os\"\n\t\"time\"\n")
	for p := range bigGoPackages {
		fmt.Fprintf(&mainSrc, "\tp%d \"biggo/p%d\"\n", p, p)
	}
	mainSrc.WriteString(")\n\nvar tables = [][]func(uint64) uint64{\n")
	for p := range bigGoPackages {
		fmt.Fprintf(&mainSrc, "\tp%d.Funcs,\n", p)
	}
	mainSrc.WriteString(`}

func main() {
	fmt.Println("ready")
	x := uint64(os.Getpid())
	for {
		start := time.Now()
		for time.Since(start) < 3*time.Millisecond {
			x = x*6364136223846793005 + 1442695040888963407
			t := tables[(x>>33)%uint64(len(tables))]
			x = t[(x>>17)%uint64(len(t))](x)
		}
		time.Sleep(97 * time.Millisecond)
	}
}
`)
	if err := write("main.go", mainSrc.String()); err != nil {
		return "", err
	}
	for p := range bigGoPackages {
		var s strings.Builder
		fmt.Fprintf(&s, "package p%d\n\n", p)
		for f := range bigGoFuncs {
			fmt.Fprintf(&s, "func F%d(x uint64) uint64 {\n", f)
			for k := range bigGoBlocks {
				c := uint64(p*1_000_003+f*7919+k*104729) | 1
				fmt.Fprintf(&s, "\tx ^= x<<%d + %d\n\tif x&%d == 0 {\n\t\tx = x*%d + %d\n\t} else {\n\t\tx = x*%d ^ %d\n\t}\n",
					k%31+1, c, 1<<(k%8), c%1000+3, k, c%977+5, c>>3)
			}
			s.WriteString("\treturn x\n}\n\n")
		}
		s.WriteString("var Funcs = []func(uint64) uint64{\n")
		for f := range bigGoFuncs {
			fmt.Fprintf(&s, "\tF%d,\n", f)
		}
		s.WriteString("}\n")
		if err := write(fmt.Sprintf("p%d/p.go", p), s.String()); err != nil {
			return "", err
		}
	}
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the big Go program: %v: %s", err, out)
	}
	st, err := os.Stat(bin)
	if err != nil {
		return "", err
	}
	if st.Size() < 100<<20 {
		return "", fmt.Errorf("the big Go program is %d MB, want at least 100", st.Size()>>20)
	}
	return bin, nil
}

// bigNodeSecs is how long the big-node case measures the agent from its
// start: the first minute, when every binary is parsed.
const bigNodeSecs = 60

// agentBigNode runs the agent on every process (no --pid) from its start on a node running
// the big Go program and, when installed (make bench-deps),
// clickhouse-server under queries and headless Chromium drawing a canvas:
// VmHWM, CPU per 10 s window and the share of the big program's samples
// with every frame named, for each build (-reference alternated).
func (b *bench) agentBigNode(base []string, s *sink) error {
	bin, err := buildBigGo(filepath.Join(b.root, "out", "bench", "biggo"))
	if err != nil {
		return err
	}
	var extra []*proc
	defer func() {
		for _, p := range extra {
			p.kill()
		}
	}()
	for _, w := range b.bigNodeWorkloads() {
		p, err := start(w[0], w[1:]...)
		if err != nil {
			b.logf("big node: %s not started: %v", w[0], err)
			continue
		}
		extra = append(extra, p)
	}
	builds := []string{b.spanprof}
	if b.reference != "" {
		builds = append(builds, b.reference)
	}
	for r := range b.rounds {
		for i := range builds {
			exe := builds[(i+r)%len(builds)]
			g, err := start(bin)
			if err != nil {
				return err
			}
			if err := g.waitFor("ready", time.Minute); err != nil {
				g.kill()
				return err
			}
			name := "biggo"
			s.watch.Store(&name)
			s.watched.Store(0)
			s.named.Store(0)
			a, err := start(exe, base...)
			if err != nil {
				g.kill()
				return err
			}
			var wins []time.Duration
			prev := time.Duration(0)
			for range bigNodeSecs / 10 {
				time.Sleep(10 * time.Second)
				c, _ := cpuNow(a.pid())
				wins = append(wins, c-prev)
				prev = c
			}
			hwm := statusKiB(a.pid(), "VmHWM")
			if hwm == 0 {
				g.kill()
				s.watch.Store(nil)
				return fmt.Errorf("%s exited before the end of the window: %s", exe, a.out.String())
			}
			a.stop(syscall.SIGINT, 10*time.Second)
			g.kill()
			s.watch.Store(nil)
			label := "after"
			if exe == b.reference {
				label = "reference"
			}
			var ws []string
			worst := time.Duration(0)
			for _, w := range wins {
				ws = append(ws, fmt.Sprintf("%.1f", 100*w.Seconds()/10))
				worst = max(worst, w)
			}
			named := 0.0
			if n := s.watched.Load(); n > 0 {
				named = 100 * float64(s.named.Load()) / float64(n)
			}
			row := fmt.Sprintf("| %s, round %d | %.1f | %.2f | %.1f | %s | %d/%d (%.1f %%) |", label, r+1, float64(hwm)/1024,
				100*prev.Seconds()/bigNodeSecs, 100*worst.Seconds()/10, strings.Join(ws, " "), s.named.Load(), s.watched.Load(), named)
			b.logf("big node: %s", row)
			b.bigNode = append(b.bigNode, row)
		}
	}
	return nil
}

// bigNodeWorkloads are the node's other programs that are installed:
// clickhouse-server under a query loop and headless Chromium.
func (b *bench) bigNodeWorkloads() [][]string {
	var ws [][]string
	if p, err := exec.LookPath("clickhouse-server"); err == nil {
		dir := filepath.Join(b.tmp, "clickhouse")
		_ = os.MkdirAll(dir, 0o755)
		ws = append(ws, []string{"sh", "-c", "cd " + dir + " && exec " + p + " -- --listen_host=127.0.0.1 --tcp_port=19000 --http_port=18123 --path=" + dir + "/"},
			[]string{"sh", "-c", "sleep 15; while :; do clickhouse-client --port 19000 -q 'SELECT sum(number % 7) FROM numbers(20000000)' >/dev/null 2>&1; sleep 1; done"})
	} else {
		b.skipped = append(b.skipped, "big node: clickhouse-server is not installed (make bench-deps)")
	}
	for _, c := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(c); err == nil {
			page := filepath.Join(b.tmp, "canvas.html")
			_ = os.WriteFile(page, []byte("<canvas id=c width=800 height=600></canvas><script>const x=document.getElementById('c').getContext('2d');let t=0;setInterval(()=>{for(let i=0;i<200;i++){x.fillStyle='hsl('+(t+i)%360+',50%,50%)';x.fillRect((t*7+i*13)%800,(t*3+i*11)%600,20,20)}t++},16)</script>"), 0o644)
			ws = append(ws, []string{p, "--headless=new", "--no-sandbox", "--disable-gpu", "--user-data-dir=" + filepath.Join(b.tmp, "chromium"), "--remote-debugging-port=0", "file://" + page})
			return ws
		}
	}
	b.skipped = append(b.skipped, "big node: chromium is not installed (make bench-deps)")
	return ws
}
