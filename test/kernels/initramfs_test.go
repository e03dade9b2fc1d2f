package kernels

import (
	"bufio"
	"debug/elf"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// payload is the guest's programs: name in the payload directory (/spanprof
// in the guest) -> file on the host.
type payload map[string]string

// initramfs is a newc cpio archive under construction.
type initramfs struct {
	w    *bufio.Writer
	ino  uint32
	seen map[string]bool
}

func (c *initramfs) header(name string, mode uint32, size int) {
	c.ino++
	fmt.Fprintf(c.w, "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, 1, 0, size, 0, 0, 0, 0, len(name)+1, 0)
	c.w.WriteString(name)
	c.w.WriteByte(0)
	c.pad(110 + len(name) + 1)
}

func (c *initramfs) pad(n int) {
	for ; n%4 != 0; n++ {
		c.w.WriteByte(0)
	}
}

// dir adds name and its parents.
func (c *initramfs) dir(name string) {
	name = strings.TrimPrefix(path.Clean(name), "/")
	if name == "." || name == "" || c.seen[name] {
		return
	}
	c.dir(path.Dir(name))
	c.seen[name] = true
	c.header(name, 0o040755, 0)
}

// file adds data as name, after its directories.
func (c *initramfs) file(name string, mode uint32, data []byte) {
	name = strings.TrimPrefix(path.Clean(name), "/")
	c.dir(path.Dir(name))
	c.seen[name] = true
	c.header(name, 0o100000|mode, len(data))
	c.w.Write(data)
	c.pad(len(data))
}

// copyFile adds the host file src (symlinks followed) as name.
func (c *initramfs) copyFile(name, src string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("read %s: %w", src, err)
	}
	c.file(name, 0o755, b)
	return nil
}

// libraries returns the guest paths of the ELF interpreter and the shared
// libraries the programs need, transitively, with their host files.
func libraries(a arch, programs []string) (map[string]string, error) {
	out := map[string]string{}
	find := func(lib string) (guest, host string, ok bool) {
		for _, d := range a.libDirs {
			if p := filepath.Join(d[0], lib); fileExists(p) {
				return path.Join(d[1], lib), p, true
			}
		}
		return "", "", false
	}
	queue := slices.Clone(programs)
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		f, err := elf.Open(p)
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", p, err)
		}
		for _, prog := range f.Progs {
			if prog.Type != elf.PT_INTERP {
				continue
			}
			b, _ := io.ReadAll(prog.Open())
			interp := strings.TrimRight(string(b), "\x00")
			host := interp
			for _, d := range a.libDirs {
				if rest, ok := strings.CutPrefix(interp, d[1]+"/"); ok && fileExists(filepath.Join(d[0], rest)) {
					host = filepath.Join(d[0], rest)
				}
			}
			if _, done := out[interp]; !done {
				out[interp] = host
			}
		}
		libs, err := f.ImportedLibraries()
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("read %s's libraries: %w", p, err)
		}
		for _, l := range libs {
			guest, host, ok := find(l)
			if !ok {
				return nil, fmt.Errorf("%s needs %s, found in none of %v", p, l, a.libDirs)
			}
			if _, done := out[guest]; !done {
				out[guest] = host
				queue = append(queue, host)
			}
		}
	}
	return out, nil
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// initScript is the guest's pid 1: the file systems spanprof uses, loopback
// for the agent's export, quiet printk so the console carries the results
// only, then the workload, then power off.
const initScript = `#!/bin/busybox sh
/bin/busybox --install -s /bin
mkdir -p /proc /sys /dev /tmp
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mount -t bpf bpf /sys/fs/bpf
mount -t tracefs tracefs /sys/kernel/tracing
mount -t debugfs debugfs /sys/kernel/debug
echo 1 1 1 1 >/proc/sys/kernel/printk
ip link set lo up
export PATH=/bin R=/spanprof W=/tmp
/bin/sh /spanprof/guest.sh 2>/tmp/guest.stderr
echo "=== RESULT exit rc=$?"
echo "=== STDERR"
cat /tmp/guest.stderr
poweroff -f
`

// writeInitramfs writes the archive: busybox, /init, the payload under
// /spanprof, and the libraries the payload's programs load.
func writeInitramfs(a arch, dst, busybox string, p payload) error {
	f, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer f.Close()
	c := &initramfs{w: bufio.NewWriterSize(f, 1<<20), seen: map[string]bool{}}
	if err := c.copyFile("bin/busybox", busybox); err != nil {
		return err
	}
	c.file("init", 0o755, []byte(initScript))
	var progs []string
	for _, name := range slices.Sorted(maps.Keys(p)) {
		if err := c.copyFile(path.Join("spanprof", name), p[name]); err != nil {
			return err
		}
		if ef, err := elf.Open(p[name]); err == nil {
			if ef.Section(".interp") != nil {
				progs = append(progs, p[name])
			}
			ef.Close()
		}
	}
	libs, err := libraries(a, progs)
	if err != nil {
		return err
	}
	for _, guest := range slices.Sorted(maps.Keys(libs)) {
		if err := c.copyFile(guest, libs[guest]); err != nil {
			return err
		}
	}
	c.header("TRAILER!!!", 0, 0)
	if err := c.w.Flush(); err != nil {
		return err
	}
	return f.Close()
}
