// Package jvm talks to running HotSpot JVMs through their dynamic attach
// mechanism, the one `jcmd` uses, so that spanprof can ask a JVM to write
// its compiled-method map (/tmp/perf-PID.map) without a Java agent or a
// restart.
//
// The protocol (HotSpot's attachListener_linux): the client creates the
// file .attach_pid<PID> in the JVM's working directory (or its /tmp) and
// sends SIGQUIT; the JVM's signal thread sees the file and starts the
// attach listener on the UNIX socket /tmp/.java_pid<PID>. A request is
// the protocol version "1", a command and three arguments, each
// NUL-terminated; the reply is a decimal status line and the command's
// output. The listener accepts a peer whose effective uid and gid are the
// JVM's, or root. PID is the JVM's pid in its own namespace and both
// files are in its mount namespace, reached through /proc/PID/root.
package jvm

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ErrNoAttach means the JVM will not start its attach listener: it does
// not handle SIGQUIT (-Xrs, or not a JVM that is up), so the signal
// would kill it, or it was started with -XX:+DisableAttachMechanism.
var ErrNoAttach = errors.New("jvm does not accept attach")

// Target is one JVM seen from the host.
type Target struct {
	PID      int    // host pid
	NSPID    int    // pid in the JVM's own pid namespace
	Root     string // /proc/PID/root
	Cwd      string // /proc/PID/cwd
	UID, GID int    // effective ids, for the socket's peer check
	procDir  string
}

// NewTarget reads what attaching needs from procRoot/PID (procRoot is
// normally /proc).
func NewTarget(procRoot string, pid int) (*Target, error) {
	dir := filepath.Join(procRoot, strconv.Itoa(pid))
	st, err := os.ReadFile(filepath.Join(dir, "status"))
	if err != nil {
		return nil, fmt.Errorf("read pid %d status: %w", pid, err)
	}
	t := &Target{PID: pid, NSPID: pid, Root: filepath.Join(dir, "root"), Cwd: filepath.Join(dir, "cwd"), procDir: dir, UID: -1, GID: -1}
	var sigCgt uint64
	for _, l := range strings.Split(string(st), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		switch k {
		case "NSpid":
			if n, err := strconv.Atoi(f[len(f)-1]); err == nil {
				t.NSPID = n
			}
		case "Uid":
			if len(f) > 1 {
				t.UID, _ = strconv.Atoi(f[1])
			}
		case "Gid":
			if len(f) > 1 {
				t.GID, _ = strconv.Atoi(f[1])
			}
		case "SigCgt":
			sigCgt, _ = strconv.ParseUint(f[0], 16, 64)
		}
	}
	if t.UID < 0 || t.GID < 0 {
		return nil, fmt.Errorf("read pid %d status: no Uid/Gid line", pid)
	}
	// Without a handler SIGQUIT's default action ends the process; a
	// JVM handles it unless started with -Xrs.
	if sigCgt&(1<<(uint(syscall.SIGQUIT)-1)) == 0 {
		return nil, fmt.Errorf("pid %d does not catch SIGQUIT: %w", pid, ErrNoAttach)
	}
	// With the mechanism disabled SIGQUIT prints a thread dump to the
	// JVM's output instead.
	if disabledAttach(dir) {
		return nil, fmt.Errorf("pid %d runs with -XX:+DisableAttachMechanism: %w", pid, ErrNoAttach)
	}
	return t, nil
}

// disabledAttach looks for -XX:+DisableAttachMechanism on the command
// line and in the variables the JVM reads options from.
func disabledAttach(dir string) bool {
	var opts []string
	if b, err := os.ReadFile(filepath.Join(dir, "cmdline")); err == nil {
		opts = strings.Split(string(b), "\x00")
	}
	if b, err := os.ReadFile(filepath.Join(dir, "environ")); err == nil {
		for _, kv := range strings.Split(string(b), "\x00") {
			k, v, _ := strings.Cut(kv, "=")
			if k == "JAVA_TOOL_OPTIONS" || k == "JDK_JAVA_OPTIONS" || k == "_JAVA_OPTIONS" {
				opts = append(opts, strings.Fields(v)...)
			}
		}
	}
	off := false
	for _, o := range opts {
		switch o {
		case "-XX:+DisableAttachMechanism":
			off = true
		case "-XX:-DisableAttachMechanism":
			off = false
		}
	}
	return off
}

func (t *Target) socketPath() string {
	return filepath.Join(t.Root, "tmp", ".java_pid"+strconv.Itoa(t.NSPID))
}

// Command runs one attach command (such as "jcmd" with the diagnostic
// command line as its first argument) and returns its output. It starts
// the attach listener when it is not running, waiting up to timeout in
// all.
func (t *Target) Command(timeout time.Duration, cmd string, args ...string) (string, error) {
	if len(args) > 3 {
		return "", fmt.Errorf("attach command %s: at most 3 arguments", cmd)
	}
	deadline := time.Now().Add(timeout)
	if err := t.startListener(deadline); err != nil {
		return "", err
	}
	conn, err := t.dial(deadline)
	if err != nil {
		return "", fmt.Errorf("connect to jvm %d attach socket: %w", t.PID, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(deadline)
	var req bytes.Buffer
	for _, s := range append([]string{"1", cmd}, append(args, "", "", "")[:3]...) {
		req.WriteString(s)
		req.WriteByte(0)
	}
	if _, err := conn.Write(req.Bytes()); err != nil {
		return "", fmt.Errorf("send attach command to jvm %d: %w", t.PID, err)
	}
	br := bufio.NewReader(conn)
	status, err := br.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("read attach reply of jvm %d: %w", t.PID, err)
	}
	out, err := io.ReadAll(io.LimitReader(br, 1<<20))
	if err != nil {
		return "", fmt.Errorf("read attach reply of jvm %d: %w", t.PID, err)
	}
	code, err := strconv.Atoi(strings.TrimSpace(status))
	if err != nil {
		return "", fmt.Errorf("read attach reply of jvm %d: bad status %q", t.PID, status)
	}
	if code != 0 {
		return "", fmt.Errorf("jvm %d attach command %s: status %d: %s", t.PID, cmd, code, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// startListener makes the JVM open its attach socket, as jcmd does.
func (t *Target) startListener(deadline time.Time) error {
	sock := t.socketPath()
	if fi, err := os.Stat(sock); err == nil && fi.Mode()&os.ModeSocket != 0 {
		return nil
	}
	name := ".attach_pid" + strconv.Itoa(t.NSPID)
	trigger := filepath.Join(t.Cwd, name)
	f, err := os.OpenFile(trigger, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		// The working directory may be read-only; HotSpot also looks in
		// its temporary directory.
		trigger = filepath.Join(t.Root, "tmp", name)
		if f, err = os.OpenFile(trigger, os.O_CREATE|os.O_WRONLY, 0o600); err != nil {
			return fmt.Errorf("create jvm %d attach trigger: %w", t.PID, err)
		}
	}
	f.Close()
	// HotSpot accepts a trigger owned by its own euid or by root; give it
	// the JVM's ids so a non-root user namespace sees an owner it maps.
	if os.Geteuid() == 0 {
		_ = os.Lchown(trigger, t.UID, t.GID)
	}
	defer os.Remove(trigger)
	if err := unix.Kill(t.PID, unix.SIGQUIT); err != nil {
		return fmt.Errorf("signal jvm %d: %w", t.PID, err)
	}
	for wait := 20 * time.Millisecond; ; wait = min(2*wait, 200*time.Millisecond) {
		if fi, err := os.Stat(sock); err == nil && fi.Mode()&os.ModeSocket != 0 {
			return nil
		}
		if _, err := os.Stat(t.procDir); err != nil {
			return fmt.Errorf("jvm %d exited while attaching", t.PID)
		}
		if time.Now().Add(wait).After(deadline) {
			return fmt.Errorf("jvm %d opened no attach socket in time (started with -XX:+DisableAttachMechanism?): %w", t.PID, ErrNoAttach)
		}
		time.Sleep(wait)
	}
}

// dial connects to the attach socket. The listener checks the peer's
// credentials, which the kernel takes at connect: as root, the connect
// runs with the JVM's effective ids, since host root is no root to a JVM
// in another user namespace.
func (t *Target) dial(deadline time.Time) (net.Conn, error) {
	if os.Geteuid() != 0 || (t.UID == 0 && t.GID == 0) {
		d := net.Dialer{Deadline: deadline}
		return d.Dial("unix", t.socketPath())
	}
	type result struct {
		conn net.Conn
		err  error
	}
	done := make(chan result, 1)
	// A goroutine of its own on a locked thread: raw setresuid changes
	// that thread alone (syscall.Setresuid would change every thread),
	// and should restoring the ids fail, the goroutine ends still locked,
	// which ends the thread instead of letting it run other goroutines.
	go func() {
		runtime.LockOSThread()
		conn, err, restored := connectAs(t.socketPath(), t.UID, t.GID)
		if restored {
			runtime.UnlockOSThread()
		}
		done <- result{conn, err}
	}()
	r := <-done
	return r.conn, r.err
}

// connectAs connects with the given effective ids on the calling thread
// and reports whether the thread's ids are root's again.
func connectAs(path string, uid, gid int) (net.Conn, error, bool) {
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, ^uintptr(0), uintptr(gid), ^uintptr(0)); e != 0 {
		return nil, fmt.Errorf("set egid %d: %w", gid, e), true
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, ^uintptr(0), uintptr(uid), ^uintptr(0)); e != 0 {
		_, _, e2 := unix.RawSyscall(unix.SYS_SETRESGID, ^uintptr(0), 0, ^uintptr(0))
		return nil, fmt.Errorf("set euid %d: %w", uid, e), e2 == 0
	}
	conn, err := connectHere(path)
	_, _, e1 := unix.RawSyscall(unix.SYS_SETRESUID, ^uintptr(0), 0, ^uintptr(0))
	_, _, e2 := unix.RawSyscall(unix.SYS_SETRESGID, ^uintptr(0), 0, ^uintptr(0))
	return conn, err, e1 == 0 && e2 == 0
}

// connectHere connects a UNIX stream socket on the calling thread.
func connectHere(path string) (net.Conn, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("create socket: %w", err)
	}
	if err := unix.Connect(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		unix.Close(fd)
		return nil, err
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	return net.FileConn(f)
}
