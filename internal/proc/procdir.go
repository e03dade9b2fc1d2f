package proc

import (
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// procDir is an open /proc/PID directory. Its files are opened relative to
// it, so the kernel resolves the pid once per process read rather than
// once per file, and read with plain system calls: an os.File costs a
// netpoller registration attempt, a finalizer and a deregistration, more
// than reading a small procfs file. Under a thousand execs a second these
// reads are most of the agent's work.
type procDir struct{ fd int }

func openDir(path string) (procDir, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return procDir{-1}, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return procDir{fd}, nil
}

func (d procDir) close() { _ = unix.Close(d.fd) }

// open opens the file name in d for reading; the caller closes the
// descriptor.
func (d procDir) open(name string) (int, error) {
	for {
		fd, err := unix.Openat(d.fd, name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return -1, &os.PathError{Op: "open", Path: name, Err: err}
		}
		return fd, nil
	}
}

// readlink returns the target of the link name in d (exe).
func (d procDir) readlink(name string) (string, error) {
	for size := 256; ; size *= 2 {
		b := make([]byte, size)
		n, err := unix.Readlinkat(d.fd, name, b)
		if err != nil {
			return "", &os.PathError{Op: "readlink", Path: name, Err: err}
		}
		if n < size {
			return string(b[:n]), nil
		}
		if size >= 1<<16 {
			return "", &os.PathError{Op: "readlink", Path: name, Err: unix.ENAMETOOLONG}
		}
	}
}

// fdReader reads a descriptor with read(2), retrying when interrupted.
type fdReader int

func (r fdReader) Read(b []byte) (int, error) {
	for {
		n, err := unix.Read(int(r), b)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return 0, err
		case n == 0 && len(b) > 0:
			return 0, io.EOF
		}
		return n, nil
	}
}
