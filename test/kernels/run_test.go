package kernels

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// console is what a run printed: its result lines and the files it
// emitted, written to dir.
type console struct {
	results map[string]map[string]string
	dir     string
	files   []string
	errs    []error // files that came out garbled
}

func (c *console) result(name, key string) string { return c.results[name][key] }

// parseConsole reads the run's output, writing a copy to logPath.
func parseConsole(r io.Reader, dir, logPath string) (*console, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	c := &console{results: map[string]map[string]string{}, dir: dir}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var file string
	var b64 strings.Builder
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		if file == "" {
			fmt.Fprintln(logf, line)
		}
		switch {
		case strings.HasPrefix(line, "=== FILE "):
			file = strings.TrimPrefix(line, "=== FILE ")
			b64.Reset()
		case file != "" && line == "=== END "+file:
			if err := c.save(file, b64.String()); err != nil {
				fmt.Fprintf(logf, "(file %s: %v)\n", file, err)
				c.errs = append(c.errs, err)
			}
			fmt.Fprintf(logf, "(file %s)\n", file)
			file = ""
		case file != "":
			b64.WriteString(strings.TrimSpace(line))
		case strings.HasPrefix(line, "=== RESULT "):
			f := strings.Fields(strings.TrimPrefix(line, "=== RESULT "))
			if len(f) == 0 {
				continue
			}
			kv := c.results[f[0]]
			if kv == nil {
				kv = map[string]string{}
				c.results[f[0]] = kv
			}
			for _, p := range f[1:] {
				k, v, _ := strings.Cut(p, "=")
				kv[k] = v
			}
		}
	}
	return c, sc.Err()
}

func (c *console) save(name, b64 string) error {
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return fmt.Errorf("decode %s: %w", name, err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		return fmt.Errorf("gunzip %s: %w", name, err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		return fmt.Errorf("gunzip %s: %w", name, err)
	}
	path := filepath.Join(c.dir, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	c.files = append(c.files, name)
	return os.WriteFile(path, data, 0o644)
}

func (c *console) path(name string) string { return filepath.Join(c.dir, filepath.FromSlash(name)) }

// boot runs the initramfs under qemu with TCG until the guest powers off or
// the timeout passes.
// Shortly before the deadline, a guest still running has its virtual
// CPUs' registers written to vcpus.txt in dir (qmpDump).
func boot(ctx context.Context, a arch, extraArgs, kernel, initrd, dir string) (*console, error) {
	// A unix socket's path must be short: not under the test's directory.
	qdir, err := os.MkdirTemp("", "qmp")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(qdir)
	sock := filepath.Join(qdir, "sock")
	args := append([]string{}, a.qemuArgs...)
	args = append(args, "-m", "2G", "-smp", strconv.Itoa(guestCPUs), "-display", "none", "-monitor", "none",
		"-qmp", "unix:"+sock+",server=on,wait=off", "-serial", "stdio", "-no-reboot",
		"-kernel", kernel, "-initrd", initrd,
		"-append", strings.TrimSpace("console="+a.console+" panic=-1 quiet loglevel=1 rdinit=/init "+a.kernelArgs+" "+extraArgs))
	cmd := exec.CommandContext(ctx, a.qemu, args...)
	done := make(chan struct{})
	dumped := make(chan struct{})
	go func() {
		defer close(dumped)
		qmpDump(ctx, sock, filepath.Join(dir, "vcpus.txt"), guestCPUs, done)
	}()
	c, err := run(cmd, dir)
	close(done)
	<-dumped
	return c, err
}

// guestCPUs is the number of virtual CPUs of a guest.
const guestCPUs = 2

// runHost runs the guest script on the host kernel, without qemu.
func runHost(ctx context.Context, payloadDir, dir string) (*console, error) {
	work, err := os.MkdirTemp("", "spanprof-kernels-host")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	cmd := exec.CommandContext(ctx, "sh", filepath.Join(payloadDir, "guest.sh"))
	cmd.Env = append(os.Environ(), "R="+payloadDir, "W="+work)
	return run(cmd, dir)
}

func run(cmd *exec.Cmd, dir string) (*console, error) {
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	c, perr := parseConsole(out, dir, filepath.Join(dir, "console.log"))
	werr := cmd.Wait()
	if werr != nil {
		return c, fmt.Errorf("%s: %w: %s", filepath.Base(cmd.Path), werr, strings.TrimSpace(stderr.String()))
	}
	return c, perr
}
