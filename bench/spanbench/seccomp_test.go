package main

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestMain doubles as the launcher of TestSeccompRlimitExec.
func TestMain(m *testing.M) {
	if os.Getenv("SPANBENCH_TEST_SECCOMP_EXEC") == "1" {
		err := seccompRlimitExec(os.Args[1:])
		fmt.Fprintln(os.Stderr, err)
		os.Exit(126)
	}
	os.Exit(m.Run())
}

// runFilter runs a classic BPF seccomp program on a seccomp_data of
// arch, nr and args, with the only instructions rlimitFilter uses.
func runFilter(t *testing.T, f []unix.SockFilter, arch, nr uint32, args ...uint64) uint32 {
	data := make([]byte, 64)
	binary.LittleEndian.PutUint32(data[seccompNr:], nr)
	binary.LittleEndian.PutUint32(data[seccompArch:], arch)
	for i, a := range args {
		binary.LittleEndian.PutUint64(data[16+8*i:], a)
	}
	var acc uint32
	for pc := 0; pc < len(f); pc++ {
		switch in := f[pc]; in.Code {
		case unix.BPF_LD | unix.BPF_W | unix.BPF_ABS:
			acc = binary.LittleEndian.Uint32(data[in.K:])
		case unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K:
			if acc == in.K {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		case unix.BPF_RET | unix.BPF_K:
			return in.K
		default:
			t.Fatalf("instruction %d: unexpected code %#x", pc, in.Code)
		}
	}
	t.Fatal("ran off the end of the filter")
	return 0
}

func TestRlimitFilter(t *testing.T) {
	f := rlimitFilter()
	if f == nil {
		t.Skipf("no filter on %s", runtime.GOARCH)
	}
	arch := f[1].K
	const ptr = 0xc00012345600
	allow, fake := uint32(unix.SECCOMP_RET_ALLOW), uint32(unix.SECCOMP_RET_ERRNO)
	for _, c := range []struct {
		name string
		arch uint32
		nr   uint32
		args []uint64
		want uint32
	}{
		{"prlimit64 sets memlock", arch, unix.SYS_PRLIMIT64, []uint64{0, unix.RLIMIT_MEMLOCK, ptr, 0}, fake},
		{"prlimit64 sets memlock, pointer above 4 GiB only", arch, unix.SYS_PRLIMIT64, []uint64{0, unix.RLIMIT_MEMLOCK, 1 << 40, ptr}, fake},
		{"prlimit64 reads memlock", arch, unix.SYS_PRLIMIT64, []uint64{0, unix.RLIMIT_MEMLOCK, 0, ptr}, allow},
		{"prlimit64 sets nofile", arch, unix.SYS_PRLIMIT64, []uint64{0, unix.RLIMIT_NOFILE, ptr, 0}, allow},
		{"setrlimit memlock", arch, unix.SYS_SETRLIMIT, []uint64{unix.RLIMIT_MEMLOCK, ptr}, fake},
		{"setrlimit nofile", arch, unix.SYS_SETRLIMIT, []uint64{unix.RLIMIT_NOFILE, ptr}, allow},
		{"other call", arch, unix.SYS_GETPID, nil, allow},
		{"other ABI", arch ^ 1, unix.SYS_PRLIMIT64, []uint64{0, unix.RLIMIT_MEMLOCK, ptr, 0}, allow},
	} {
		if got := runFilter(t, f, c.arch, c.nr, c.args...); got != c.want {
			t.Errorf("%s: %#x, want %#x", c.name, got, c.want)
		}
	}
}

// TestSeccompRlimitExec runs a shell under the filter: raising
// RLIMIT_MEMLOCK succeeds and changes nothing, lowering RLIMIT_NOFILE
// takes effect.
func TestSeccompRlimitExec(t *testing.T) {
	if rlimitFilter() == nil {
		t.Skipf("no filter on %s", runtime.GOARCH)
	}
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Cur == unix.RLIM_INFINITY {
		t.Skip("RLIMIT_MEMLOCK is already unlimited")
	}
	cmd := exec.Command(os.Args[0], "--", "/bin/sh", "-c", "ulimit -l unlimited && ulimit -l && ulimit -n 100 && ulimit -n")
	cmd.Env = append(os.Environ(), "SPANBENCH_TEST_SECCOMP_EXEC=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got, want := strings.Fields(string(out)), []string{fmt.Sprint(lim.Cur / 1024), "100"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("ulimit -l, ulimit -n under the filter: %q, want %q", got, want)
	}
}
