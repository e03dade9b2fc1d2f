package tracectx

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Hook is an exported spanprof_set_trace_context to attach a uprobe to.
type Hook struct {
	// Path is the file's path inside the process's mount namespace.
	Path string
	// OpenPath reaches the same file from the agent (/proc/PID/root/...).
	OpenPath string
	// Offset is the function's file offset: the uprobe address.
	Offset uint64
}

// ProcessInfo is what one process publishes for trace correlation.
type ProcessInfo struct {
	PID int
	// ThreadContext locates otel_thread_ctx_v1; Kind is LocationNone when
	// the process does not export it.
	ThreadContext Location
	// ThreadContextModule is the path of the module defining the variable.
	ThreadContextModule string
	// Hooks lists every mapped file exporting spanprof_set_trace_context.
	Hooks []Hook
	// Resource is the OTEP 4719 process context's resource (nil if none).
	Resource map[string]string
	// AttributeKeyMap names the thread-context attribute keys by index.
	AttributeKeyMap []string
	// ServiceName: process context service.name, else OTEL_SERVICE_NAME,
	// else service.name in OTEL_RESOURCE_ATTRIBUTES; "" when none.
	ServiceName string
	// Errors are non-fatal problems (an unreadable module, an unresolved TLS
	// slot, a malformed process context); the rest of the info holds.
	Errors []error
}

// Scan inspects a running process: every mapped ELF file for
// otel_thread_ctx_v1 and spanprof_set_trace_context, the process context,
// and the environment. It fails only when the process cannot be read at all
// (gone, or no permission: the agent needs root or CAP_SYS_PTRACE).
func Scan(pid int) (*ProcessInfo, error) {
	maps, err := readMaps(pid)
	if err != nil {
		return nil, err
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		return nil, fmt.Errorf("open process memory: %w", err)
	}
	defer mem.Close()
	info := &ProcessInfo{PID: pid}
	scanModules(pid, mem, maps, info)

	pc, err := loadProcessContext(mem, maps)
	switch {
	case err == nil:
		info.Resource, info.AttributeKeyMap = pc.Resource, pc.AttributeKeyMap
		info.ServiceName = pc.Resource["service.name"]
	case !errors.Is(err, ErrNoProcessContext):
		info.Errors = append(info.Errors, err)
	}
	if info.ServiceName == "" {
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil {
			info.Errors = append(info.Errors, fmt.Errorf("read environment: %w", err))
		}
		info.ServiceName = serviceNameFromEnv(env)
	}
	return info, nil
}

type module struct {
	m    mapping // the mapping the load bias was computed from
	path string
	open string
	main bool
	bias uint64
	v    *TLSVar
}

func scanModules(pid int, mem io.ReaderAt, maps []mapping, info *ProcessInfo) {
	exeDev, exeIno, exeErr := statExe(pid)
	seen := map[string]bool{}
	var mods []module
	for _, m := range maps {
		if m.inode == 0 || !strings.HasPrefix(m.path, "/") || strings.HasPrefix(m.path, "/memfd:") {
			continue
		}
		key := m.dev + ":" + strconv.FormatUint(m.inode, 10)
		if seen[key] {
			continue
		}
		f, open, err := openMapped(pid, m)
		if err != nil {
			seen[key] = true
			info.Errors = append(info.Errors, err)
			continue
		}
		bias, ok := loadBias(f, m)
		if !ok {
			f.Close() // not the segment that starts the file; a later mapping is
			continue
		}
		seen[key] = true
		mod := module{m: m, path: m.path, open: open, bias: bias,
			main: exeErr == nil && m.inode == exeIno && m.dev == exeDev}
		ds, err := readDynsym(f)
		if err != nil {
			f.Close()
			if !errors.Is(err, elf.ErrNoSymbols) {
				info.Errors = append(info.Errors, fmt.Errorf("read .dynsym of %s: %w", m.path, err))
			}
			continue
		}
		if off, err := hookIn(f, ds, m.path); err == nil {
			info.Hooks = append(info.Hooks, Hook{Path: m.path, OpenPath: rootPath(pid, m.path), Offset: off})
		} else if !errors.Is(err, ErrNotFound) {
			info.Errors = append(info.Errors, err)
		}
		mod.v, err = threadContextIn(f, ds, m.path)
		f.Close()
		if err != nil {
			if !errors.Is(err, ErrNotFound) {
				info.Errors = append(info.Errors, err)
			}
			continue
		}
		mods = append(mods, mod)
	}
	loc, path, err := locate(mem, mods)
	if err != nil {
		info.Errors = append(info.Errors, err)
	}
	info.ThreadContext, info.ThreadContextModule = loc, path
}

// locate picks the defining module (the main program first: glibc resolves
// the symbol there first too) and resolves the variable from its GOT slots,
// or from the slots of modules that reference it.
func locate(mem io.ReaderAt, mods []module) (Location, string, error) {
	var def *module
	for i := range mods {
		if mods[i].v.Defined && (def == nil || mods[i].main) {
			def = &mods[i]
		}
	}
	if def == nil {
		return Location{}, "", nil
	}
	loc, err := Resolve(mem, def.v, def.bias, def.main)
	if err == nil {
		return loc, def.path, nil
	}
	errs := []error{err}
	for i := range mods {
		if mods[i].v.Defined {
			continue
		}
		l, err := Resolve(mem, mods[i].v, mods[i].bias, false)
		if err == nil {
			return l, def.path, nil
		}
		errs = append(errs, err)
	}
	return Location{}, def.path, errors.Join(errs...)
}

// openMapped opens the file behind a mapping: through map_files (exactly the
// mapped inode, even if deleted or in another mount namespace), else through
// the process's root.
func openMapped(pid int, m mapping) (*elf.File, string, error) {
	p := fmt.Sprintf("/proc/%d/map_files/%x-%x", pid, m.start, m.end)
	if f, err := elf.Open(p); err == nil {
		return f, p, nil
	}
	p = rootPath(pid, strings.TrimSuffix(m.path, " (deleted)"))
	f, err := elf.Open(p)
	if err != nil {
		return nil, "", fmt.Errorf("open mapped file %s: %w", m.path, err)
	}
	return f, p, nil
}

func rootPath(pid int, path string) string { return fmt.Sprintf("/proc/%d/root%s", pid, path) }

// loadBias returns run-time minus link-time address for the PT_LOAD that m
// maps, if m maps the start of one.
func loadBias(f *elf.File, m mapping) (uint64, bool) {
	page := uint64(os.Getpagesize())
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Off&^(page-1) == m.off {
			return m.start - p.Vaddr&^(page-1), true
		}
	}
	return 0, false
}

func statExe(pid int) (dev string, ino uint64, err error) {
	var st unix.Stat_t
	if err := unix.Stat(fmt.Sprintf("/proc/%d/exe", pid), &st); err != nil {
		return "", 0, fmt.Errorf("stat executable: %w", err)
	}
	return fmt.Sprintf("%02x:%02x", unix.Major(st.Dev), unix.Minor(st.Dev)), st.Ino, nil
}

func serviceNameFromEnv(env []byte) string {
	var fromAttrs string
	for _, kv := range bytes.Split(env, []byte{0}) {
		k, v, ok := strings.Cut(string(kv), "=")
		if !ok {
			continue
		}
		switch k {
		case "OTEL_SERVICE_NAME":
			if v != "" {
				return v
			}
		case "OTEL_RESOURCE_ATTRIBUTES":
			for _, a := range strings.Split(v, ",") {
				if ak, av, ok := strings.Cut(strings.TrimSpace(a), "="); ok && ak == "service.name" {
					fromAttrs = av
				}
			}
		}
	}
	return fromAttrs
}

// mapping is one line of /proc/PID/maps.
type mapping struct {
	start, end, off uint64
	perms, dev      string
	inode           uint64
	path            string
}

func readMaps(pid int) ([]mapping, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, fmt.Errorf("open process maps: %w", err)
	}
	defer f.Close()
	return parseMaps(f)
}

func parseMaps(r io.Reader) ([]mapping, error) {
	var out []mapping
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		// start-end perms offset dev inode [path]; the path may hold spaces.
		fields := strings.SplitN(sc.Text(), " ", 6)
		if len(fields) < 5 {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			return nil, fmt.Errorf("parse maps line %q: no address range", sc.Text())
		}
		var m mapping
		var errs [4]error
		m.start, errs[0] = strconv.ParseUint(lo, 16, 64)
		m.end, errs[1] = strconv.ParseUint(hi, 16, 64)
		m.off, errs[2] = strconv.ParseUint(fields[2], 16, 64)
		m.inode, errs[3] = strconv.ParseUint(fields[4], 10, 64)
		if err := errors.Join(errs[:]...); err != nil {
			return nil, fmt.Errorf("parse maps line %q: %w", sc.Text(), err)
		}
		m.perms, m.dev = fields[1], fields[3]
		if len(fields) == 6 {
			m.path = strings.TrimLeft(fields[5], " ")
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read process maps: %w", err)
	}
	return out, nil
}
