package kernels

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

// A guest that hangs in its kernel runs no watchdog (guest.sh): what its
// CPUs are doing is asked of qemu itself, over its QMP socket, shortly
// before the run's deadline. Three rounds a second apart show whether
// each CPU is stuck at one place (a spinning lock: the same few
// instructions, a pause in them) or moving.

// qmpDump waits until shortly before ctx's deadline and, if the guest
// still runs then (done not closed), writes the registers and the next
// instructions of each virtual CPU to path.
func qmpDump(ctx context.Context, sock, path string, cpus int, done <-chan struct{}) {
	dl, ok := ctx.Deadline()
	if !ok {
		return
	}
	select {
	case <-done:
		return
	case <-time.After(time.Until(dl) - 30*time.Second):
	}
	var out strings.Builder
	if err := qmpRounds(sock, cpus, &out); err != nil {
		fmt.Fprintf(&out, "qmp: %v\n", err)
	}
	_ = os.WriteFile(path, []byte(out.String()), 0o644)
}

func qmpRounds(sock string, cpus int, out *strings.Builder) error {
	conn, err := net.DialTimeout("unix", sock, 5*time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	r := bufio.NewReader(conn)
	if _, err := r.ReadBytes('\n'); err != nil { // the greeting
		return fmt.Errorf("read greeting: %w", err)
	}
	call := func(cmd string, args map[string]any) (string, error) {
		req := map[string]any{"execute": cmd}
		if args != nil {
			req["arguments"] = args
		}
		b, _ := json.Marshal(req)
		if _, err := conn.Write(append(b, '\n')); err != nil {
			return "", err
		}
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				return "", err
			}
			var resp struct {
				Return json.RawMessage `json:"return"`
				Error  *struct{ Desc string }
				Event  string `json:"event"`
			}
			if err := json.Unmarshal(line, &resp); err != nil {
				return "", err
			}
			switch {
			case resp.Event != "":
				continue
			case resp.Error != nil:
				return "", fmt.Errorf("%s: %s", cmd, resp.Error.Desc)
			}
			var s string
			if json.Unmarshal(resp.Return, &s) != nil {
				s = string(resp.Return)
			}
			return s, nil
		}
	}
	if _, err := call("qmp_capabilities", nil); err != nil {
		return err
	}
	for round := 1; round <= 3; round++ {
		for cpu := 0; cpu < cpus; cpu++ {
			for _, hmp := range []string{"info registers", "x/6i $pc"} {
				s, err := call("human-monitor-command", map[string]any{"command-line": hmp, "cpu-index": cpu})
				if err != nil {
					return err
				}
				if hmp == "info registers" {
					s = registerLines(s)
				}
				fmt.Fprintf(out, "--- round %d, cpu %d: %s\n%s", round, cpu, hmp, s)
			}
		}
		time.Sleep(time.Second)
	}
	return nil
}

// registerLines keeps the lines of "info registers" that say where a CPU
// is: its program counter and stack pointer (x86-64: RIP, RSP; arm64: PC,
// SP, PSTATE).
func registerLines(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		for _, k := range []string{"RIP=", "RSP=", "EIP=", "ESP=", "PC=", "SP_EL", "PSTATE="} {
			if strings.Contains(l, k) {
				b.WriteString(strings.TrimRight(l, "\r") + "\n")
				break
			}
		}
	}
	return b.String()
}
