package tracectx

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// procMem is /proc/PID/mem read with plain pread(2): an os.File costs a
// netpoller registration attempt and a finalizer, more than the few reads
// a scan makes, and every new process is scanned (under churn, hundreds a
// second). Errors read as os.File's do.
type procMem struct {
	fd   int
	path string
}

func openProcMem(pid int) (procMem, error) {
	path := fmt.Sprintf("/proc/%d/mem", pid)
	for {
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return procMem{fd: -1}, &os.PathError{Op: "open", Path: path, Err: err}
		}
		return procMem{fd: fd, path: path}, nil
	}
}

func (m procMem) Close() error { return unix.Close(m.fd) }

// ReadAt fills b from offset off, as os.File.ReadAt does: short only
// with an error.
func (m procMem) ReadAt(b []byte, off int64) (int, error) {
	n := 0
	for n < len(b) {
		k, err := unix.Pread(m.fd, b[n:], off+int64(n))
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return n, &os.PathError{Op: "read", Path: m.path, Err: err}
		case k == 0:
			return n, io.EOF
		}
		n += k
	}
	return n, nil
}

// readProcFile reads a procfs file whole with plain system calls, for
// the reason procMem gives; errors read as os.ReadFile's do.
func readProcFile(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	for errors.Is(err, unix.EINTR) {
		fd, err = unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	b := make([]byte, 0, 4096)
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := unix.Read(fd, b[len(b):cap(b)])
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		case n == 0:
			return b, nil
		}
		b = b[:len(b)+n]
	}
}
