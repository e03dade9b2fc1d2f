package e2e

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/spanprof/spanprof/internal/testutil"
)

// exitSeesMM is whether the running kernel fires sched_process_exit
// before exit_mm() (Linux 6.16 on).
func exitSeesMM(t *testing.T) bool {
	maj, min, err := testutil.KernelRelease()
	if err != nil {
		t.Fatal(err)
	}
	return maj > 6 || maj == 6 && min >= 16
}

// TestRecordTracefs runs record in a private mount namespace (so the
// machine's mounts stay as they are) with tracefs mounted, with it
// unmounted, and with it unmounted and no CAP_SYS_ADMIN to mount it. It
// checks that record mounts it when it may, attaches the exit_group
// tracepoint whenever tracefs is there, says what to run when it cannot
// mount, and warns about kernels before 6.16 only on such a kernel.
func TestRecordTracefs(t *testing.T) {
	testutil.RequireRoot(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("unshare (util-linux) not installed")
	}
	if _, err := exec.LookPath("capsh"); err != nil {
		t.Skip("capsh (libcap2-bin) not installed")
	}
	// A busy target: a recording without a sample is an error.
	target := startFixture(t, "gofix", "60000")
	record := fmt.Sprintf("%s record -v --pid %d --duration 1s", binPath, target.Process.Pid)
	const unmount = "umount /sys/kernel/tracing 2>/dev/null; umount /sys/kernel/debug/tracing 2>/dev/null; umount /sys/kernel/debug 2>/dev/null; "
	const mount = "mountpoint -q /sys/kernel/tracing || mount -t tracefs tracefs /sys/kernel/tracing; "
	newKernel := exitSeesMM(t)
	// The namespaces are private: the machine's mounts must stay as they are.
	before := hostTracefs()
	tests := []struct {
		name      string
		script    string
		mounts    bool // record mounts tracefs
		exitGroup bool // the exit_group tracepoint is attached
		hint      bool // record says what to run
	}{
		{"mounted", mount + "exec " + record, false, true, false},
		{"not mounted", unmount + "exec " + record, true, true, false},
		{"not mounted, no CAP_SYS_ADMIN", unmount + "exec capsh --drop=cap_sys_admin -- -c '" + record + "'", false, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", tt.script)
			out, err := cmd.CombinedOutput()
			stderr := string(out)
			if err != nil {
				t.Fatalf("%s: %v\n%s", tt.script, err, stderr)
			}
			if got := strings.Contains(stderr, "mounted tracefs at /sys/kernel/tracing"); got != tt.mounts {
				t.Errorf("mounted tracefs: %v, want %v", got, tt.mounts)
			}
			if want := fmt.Sprintf("exit_group=%v", tt.exitGroup); !strings.Contains(stderr, want) {
				t.Errorf("want %s in the log", want)
			}
			if got := strings.Contains(stderr, "as root run: mount -t tracefs tracefs /sys/kernel/tracing"); got != tt.hint {
				t.Errorf("says what to run: %v, want %v", got, tt.hint)
			}
			warned := strings.Contains(stderr, "level=WARN") && strings.Contains(stderr, "before 6.16")
			if want := !tt.exitGroup && !newKernel; warned != want {
				t.Errorf("warns about kernels before 6.16: %v, want %v (kernel from 6.16 on: %v)", warned, want, newKernel)
			}
			if t.Failed() {
				t.Logf("stderr:\n%s", grepLines(stderr, "tracefs", "exit", "6.16"))
			}
		})
	}
	if after := hostTracefs(); after != before {
		t.Errorf("the machine's tracefs mounted: %v before, %v after", before, after)
	}
}

// hostTracefs reports whether tracefs is mounted at /sys/kernel/tracing
// in the test's own mount namespace.
func hostTracefs() bool {
	var st unix.Statfs_t
	return unix.Statfs("/sys/kernel/tracing", &st) == nil && int64(st.Type) == unix.TRACEFS_MAGIC
}

// grepLines keeps the lines of s holding any of words.
func grepLines(s string, words ...string) string {
	var keep []string
	for _, l := range strings.Split(s, "\n") {
		for _, w := range words {
			if strings.Contains(l, w) {
				keep = append(keep, l)
				break
			}
		}
	}
	return strings.Join(keep, "\n")
}
