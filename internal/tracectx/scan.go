package tracectx

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"

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
	// File names the file as the maps do, device and inode ("fd:01
	// 1234"): a uprobe is per inode, whatever path reaches it.
	File string
}

// ProcessInfo is what one process publishes for trace correlation.
type ProcessInfo struct {
	PID int
	// ThreadContext locates otel_thread_ctx_v1; Kind is LocationNone when
	// the process does not export it.
	ThreadContext Location
	// ThreadContextModule is the path of the module defining the variable.
	ThreadContextModule string
	// NodeContext locates the Node.js writer's discovery struct
	// (NodeDiscoverySymbol), LocationNone without one; NodeContextModule
	// is the addon defining it.
	NodeContext       Location
	NodeContextModule string
	// ElasticContext locates ElasticContextSymbol (Elastic APM's
	// correlation pointer), ElasticContextModule its module; Kind is
	// LocationNone when no mapped file defines it.
	ElasticContext       Location
	ElasticContextModule string
	// Hooks lists every mapped file exporting spanprof_set_trace_context.
	Hooks []Hook
	// Loader is the dynamic loader's debugger hook (LoaderHookSymbol),
	// which the loader calls as it loads or unloads a library; nil when
	// no mapped loader file exports it (a static executable, a Go
	// program without cgo).
	Loader *Hook
	// ContextAddr is the address of the process context's header, 0
	// without one; ContextPublishedAt its monotonic_published_at_ns as
	// read (ReadContextPublishedAt tells a later update).
	ContextAddr, ContextPublishedAt uint64
	// Resource is the OTEP 4719 process context's resource (nil if none).
	Resource map[string]string
	// AttributeKeyMap names the thread-context attribute keys by index;
	// nil when the process publishes none or a schema version not read.
	AttributeKeyMap []string
	// SchemaVersion is the process context's threadlocal.schema_version.
	SchemaVersion string
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
// A Scanner remembers what files said, for scanning many processes.
func Scan(pid int) (*ProcessInfo, error) { return (*Scanner)(nil).Scan(pid) }

// Scanner scans processes, reading each version of a mapped file once:
// libc and ld.so are in every process, and the agent scans a process
// several times while it publishes no context. Safe for concurrent use.
type Scanner struct {
	mu    sync.Mutex
	max   int
	files map[fileKey]*fileScan
}

// NewScanner returns a Scanner that remembers up to max file versions
// (then forgets them all and starts again).
func NewScanner(max int) *Scanner {
	return &Scanner{max: max, files: map[fileKey]*fileScan{}}
}

// fileKey is one version of a mapped file, as stat tells it apart.
type fileKey struct {
	dev, ino, size uint64
	mtime          int64
	path           string // errors and TLSVar name it
}

// fileScan is what one file says: where its segments load, and the
// results of looking the two contract symbols up.
type fileScan struct {
	// notELF: the file is data (a font, a locale archive), no module.
	notELF bool
	// retry: the .dynsym read failed, and may not next time; not kept.
	retry   bool
	progs   []*elf.Prog
	interp  string // PT_INTERP
	noSyms  bool   // no .dynsym: nothing to look up
	hook    uint64
	hookErr error
	// debugState: LoaderHookSymbol's file offset in a loader file, 0
	// when the file is not one or does not export it.
	debugState uint64
	v          *TLSVar
	vErr       error
	// node: the Node.js writer's otel_thread_ctx_nodejs_v1, nil when
	// the file does not define it.
	node *TLSVar
	// ev, evErr: ElasticContextSymbol's lookup (.dynsym only).
	ev    *TLSVar
	evErr error
}

// ProcRead is what the caller read of /proc/PID for a scan, so the
// process is not read twice (proc.Tracker's ProcRead): the maps text, the
// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES entries of the
// environment (NUL-terminated, in their order; other entries are ignored
// if present), and the executable's stat. The process memory is still
// read here, and so is what r leaves out: Environ and EnvErr both nil,
// Exe and ExeErr both nil.
type ProcRead struct {
	Maps    []byte
	Environ []byte
	EnvErr  error
	Exe     *unix.Stat_t
	ExeErr  error
}

// Scan is the package's Scan, remembering the files it read.
func (s *Scanner) Scan(pid int) (*ProcessInfo, error) { return s.ScanRead(pid, nil) }

// ScanRead is Scan with what r holds already read (nil: read it all).
func (s *Scanner) ScanRead(pid int, r *ProcRead) (*ProcessInfo, error) {
	var maps []mapping
	var err error
	if r != nil {
		maps, err = parseMapsText(r.Maps)
	} else {
		maps, err = readMaps(pid)
	}
	if err != nil {
		return nil, err
	}
	mem, err := openProcMem(pid)
	if err != nil {
		return nil, fmt.Errorf("open process memory: %w", err)
	}
	defer mem.Close()
	info := &ProcessInfo{PID: pid}
	// The mapped files are looked up from /proc/PID, resolved once.
	dir, err := unix.Open(fmt.Sprintf("/proc/%d", pid), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		dir = unix.AT_FDCWD // statMapped then takes the full paths
	} else {
		defer unix.Close(dir)
	}
	s.scanModules(pid, dir, mem, maps, exeOf(pid, r), info)

	pc, err := loadProcessContext(mem, maps)
	switch {
	case err == nil:
		info.ContextAddr, info.ContextPublishedAt = pc.Addr, pc.PublishedAtNs
		info.Resource, info.AttributeKeyMap = pc.Resource, pc.AttributeKeyMap
		info.ServiceName = pc.Resource["service.name"]
		info.SchemaVersion = pc.Extra[SchemaVersionKey]
		var err error
		if info.AttributeKeyMap, err = pc.KeyMap(); err != nil {
			info.Errors = append(info.Errors, err)
		}
	case !errors.Is(err, ErrNoProcessContext):
		info.Errors = append(info.Errors, err)
	}
	if info.ServiceName == "" {
		var env []byte
		if r != nil && (r.Environ != nil || r.EnvErr != nil) {
			env, err = r.Environ, r.EnvErr
		} else {
			env, err = readProcFile(fmt.Sprintf("/proc/%d/environ", pid))
		}
		if err != nil {
			info.Errors = append(info.Errors, fmt.Errorf("read environment: %w", err))
		}
		info.ServiceName = serviceNameFromEnv(env)
	}
	return info, nil
}

// exeID names the executable as maps does (device "MM:mm", inode), or
// the error of its stat.
type exeID struct {
	dev string
	ino uint64
	err error
}

// exeOf is the executable of pid, from r when it holds the stat.
func exeOf(pid int, r *ProcRead) exeID {
	if r == nil || r.Exe == nil && r.ExeErr == nil {
		dev, ino, err := statExe(pid)
		return exeID{dev, ino, err}
	}
	if r.Exe == nil {
		return exeID{err: fmt.Errorf("stat executable: %w", r.ExeErr)}
	}
	return exeID{devName(r.Exe.Dev), r.Exe.Ino, nil}
}

type module struct {
	m    mapping // the mapping the load bias was computed from
	path string
	main bool
	bias uint64
	v    *TLSVar
}

func (s *Scanner) scanModules(pid, dir int, mem io.ReaderAt, maps []mapping, exe exeID, info *ProcessInfo) {
	exeDev, exeIno, exeErr := exe.dev, exe.ino, exe.err
	seen := map[string]bool{}
	var mods, emods []module
	musl := false
	for _, m := range maps {
		musl = musl || isMuslLibc(m.path)
		if m.inode == 0 || !strings.HasPrefix(m.path, "/") || strings.HasPrefix(m.path, "/memfd:") {
			continue
		}
		key := m.dev + ":" + strconv.FormatUint(m.inode, 10)
		if seen[key] {
			continue
		}
		fs, err := s.file(pid, dir, m)
		if err != nil {
			seen[key] = true
			info.Errors = append(info.Errors, err)
			continue
		}
		if fs.notELF {
			seen[key] = true // mapped data, not an error
			continue
		}
		bias, ok := loadBias(fs.progs, m)
		if !ok {
			continue // not the segment that starts the file; a later mapping is
		}
		seen[key] = true
		isMain := exeErr == nil && m.inode == exeIno && m.dev == exeDev
		musl = musl || isMain && strings.Contains(fs.interp, "ld-musl-")
		if fs.noSyms {
			continue
		}
		if fs.debugState != 0 && info.Loader == nil {
			info.Loader = &Hook{Path: m.path, OpenPath: rootPath(pid, m.path), Offset: fs.debugState,
				File: m.dev + " " + strconv.FormatUint(m.inode, 10)}
		}
		if fs.hookErr == nil {
			info.Hooks = append(info.Hooks, Hook{Path: m.path, OpenPath: rootPath(pid, m.path), Offset: fs.hook,
				File: m.dev + " " + strconv.FormatUint(m.inode, 10)})
		} else if !errors.Is(fs.hookErr, ErrNotFound) {
			info.Errors = append(info.Errors, fs.hookErr)
		}
		if fs.node != nil && info.NodeContext.Kind == LocationNone {
			// The addon is loaded late (dlopen): found at the rescan the
			// loader's link-map event triggers.
			loc, err := Resolve(mem, fs.node, bias, isMain)
			if err == nil && musl {
				err = fmt.Errorf("locate %s in %s: musl is not read", NodeDiscoverySymbol, m.path)
			}
			if err != nil {
				info.Errors = append(info.Errors, err)
			} else {
				info.NodeContext, info.NodeContextModule = loc, m.path
			}
		}
		if fs.evErr == nil {
			emods = append(emods, module{m: m, path: m.path, bias: bias, v: fs.ev, main: isMain})
		} else if !errors.Is(fs.evErr, ErrNotFound) {
			info.Errors = append(info.Errors, fs.evErr)
		}
		if fs.vErr != nil {
			if !errors.Is(fs.vErr, ErrNotFound) {
				info.Errors = append(info.Errors, fs.vErr)
			}
			continue
		}
		mods = append(mods, module{m: m, path: m.path, bias: bias, v: fs.v, main: isMain})
	}
	loc, path, err := locate(mem, mods)
	loc.Musl = musl && loc.Kind == LocationDTV
	if loc.Musl && runtime.GOARCH != "amd64" {
		// musl keeps its dtv pointer elsewhere on TLS-above-TP machines;
		// not read rather than read wrong.
		info.Errors = append(info.Errors, fmt.Errorf("locate %s in %s: musl dynamic TLS is read on x86-64 only", ThreadContextSymbol, path))
		loc = Location{}
	}
	if err != nil {
		info.Errors = append(info.Errors, err)
	}
	info.ThreadContext, info.ThreadContextModule = loc, path
	if len(emods) == 0 {
		return
	}
	eloc, epath, err := locate(mem, emods)
	eloc.Musl = musl && eloc.Kind == LocationDTV
	if eloc.Musl && runtime.GOARCH != "amd64" {
		info.Errors = append(info.Errors, fmt.Errorf("locate %s in %s: musl dynamic TLS is read on x86-64 only", ElasticContextSymbol, epath))
		eloc = Location{}
	}
	if err != nil {
		info.Errors = append(info.Errors, err)
	}
	info.ElasticContext, info.ElasticContextModule = eloc, epath
}

// file returns what the file behind mapping m says, read once per file
// version when s remembers. dir is /proc/PID open, or AT_FDCWD.
func (s *Scanner) file(pid, dir int, m mapping) (*fileScan, error) {
	var key fileKey
	if s != nil {
		if st, err := statMapped(pid, dir, m); err == nil {
			key = fileKey{dev: uint64(st.Dev), ino: st.Ino, size: uint64(st.Size),
				mtime: st.Mtim.Nano(), path: m.path}
			s.mu.Lock()
			fs, ok := s.files[key]
			s.mu.Unlock()
			if ok {
				return fs, nil
			}
		}
	}
	f, err := openMapped(pid, m)
	var fs *fileScan
	switch {
	case isNotELF(err):
		// Remembered like a module, so that the processes mapping
		// the file (a browser's every process maps its fonts) do not
		// open it again at each scan.
		fs = &fileScan{notELF: true}
	case err != nil:
		return nil, err
	default:
		defer f.Close()
		fs = s.scanELF(f, m)
	}
	if s != nil && key.ino != 0 && !fs.retry {
		s.mu.Lock()
		if len(s.files) >= s.max {
			clear(s.files)
		}
		s.files[key] = fs
		s.mu.Unlock()
	}
	return fs, nil
}

// isNotELF reports whether err is openMapped's for a file that is not
// ELF at all, rather than a broken one or one it could not read.
func isNotELF(err error) bool {
	var fe *elf.FormatError
	return errors.As(err, &fe) && strings.HasPrefix(fe.Error(), "bad magic number")
}

// scanELF looks up in f, the file m maps, what scanModules needs of it.
func (s *Scanner) scanELF(f *elf.File, m mapping) *fileScan {
	fs := &fileScan{progs: f.Progs, interp: interpOf(f)}
	ds, err := readDynsym(f)
	switch {
	case errors.Is(err, elf.ErrNoSymbols):
		// A static executable: its .symtab may still name the variable.
		fs.hookErr = fmt.Errorf("find %s in %s (no .dynsym): %w", HookSymbol, m.path, ErrNotFound)
		fs.v, fs.vErr = staticThreadContext(f, m.path)
		fs.evErr = ErrNotFound
		fs.noSyms = fs.vErr != nil && errors.Is(fs.vErr, ErrNotFound)
	case err != nil:
		// Not remembered: the read may work next time.
		fs.hookErr = fmt.Errorf("read .dynsym of %s: %w", m.path, err)
		fs.vErr, fs.evErr = ErrNotFound, ErrNotFound
		fs.retry = true
		return fs
	default:
		fs.hook, fs.hookErr = hookIn(f, ds, m.path)
		fs.v, fs.vErr = threadContextIn(f, ds, m.path)
		if nv, err := tlsVarIn(f, ds, m.path, NodeDiscoverySymbol); err == nil && nv.Defined {
			fs.node = nv
		}
		fs.ev, fs.evErr = tlsVarIn(f, ds, m.path, ElasticContextSymbol)
		if isLoader(m.path) {
			fs.debugState, _ = funcOffset(f, ds, LoaderHookSymbol, m.path)
		}
	}
	return fs
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
func openMapped(pid int, m mapping) (*elf.File, error) {
	if f, err := elf.Open(mapFilesPath(pid, m)); err == nil {
		return f, nil
	}
	f, err := elf.Open(rootPath(pid, strings.TrimSuffix(m.path, " (deleted)")))
	if err != nil {
		return nil, fmt.Errorf("open mapped file %s: %w", m.path, err)
	}
	return f, nil
}

// statMapped stats the file behind a mapping the way openMapped opens it,
// through dir (/proc/PID open; AT_FDCWD: the full path) when it can.
func statMapped(pid, dir int, m mapping) (unix.Stat_t, error) {
	var st unix.Stat_t
	var err error
	if dir == unix.AT_FDCWD {
		err = unix.Stat(mapFilesPath(pid, m), &st)
	} else {
		err = unix.Fstatat(dir, fmt.Sprintf("map_files/%x-%x", m.start, m.end), &st, 0)
	}
	if err != nil {
		err = unix.Stat(rootPath(pid, strings.TrimSuffix(m.path, " (deleted)")), &st)
	}
	return st, err
}

func mapFilesPath(pid int, m mapping) string {
	return fmt.Sprintf("/proc/%d/map_files/%x-%x", pid, m.start, m.end)
}

func rootPath(pid int, path string) string { return fmt.Sprintf("/proc/%d/root%s", pid, path) }

// loadBias returns run-time minus link-time address for the PT_LOAD that m
// maps, if m maps the start of one.
func loadBias(progs []*elf.Prog, m mapping) (uint64, bool) {
	page := uint64(os.Getpagesize())
	for _, p := range progs {
		if p.Type == elf.PT_LOAD && p.Off&^(page-1) == m.off {
			return m.start - p.Vaddr&^(page-1), true
		}
	}
	return 0, false
}

// isMuslLibc reports whether a mapped file is musl's libc, which is also
// its dynamic loader: /lib/ld-musl-ARCH.so.1 (its PT_INTERP name),
// libc.musl-ARCH.so.1, or Debian's /usr/lib/ARCH-linux-musl/libc.so that
// the loader's name links to.
func isMuslLibc(path string) bool {
	base := path[strings.LastIndexByte(path, '/')+1:]
	return strings.HasPrefix(base, "ld-musl-") || strings.HasPrefix(base, "libc.musl-") ||
		strings.Contains(path, "-linux-musl/")
}

// LoaderHookSymbol is the dynamic loader's debugger hook: glibc's ld.so
// and musl's libc.so call it whenever the link map changes (r_debug's
// r_brk), at start-up and at each dlopen and dlclose.
const LoaderHookSymbol = "_dl_debug_state"

// SystemLoaders are the dynamic loaders' paths (PT_INTERP names) of
// glibc and musl on x86-64 and arm64.
var SystemLoaders = []string{
	"/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1",
	"/lib/ld-musl-x86_64.so.1", "/lib/ld-musl-aarch64.so.1",
}

// LoaderAt returns the debugger hook of the loader file at path, named
// as a scan of a process mapping that file names it (Hook.File: device
// and inode as the maps show them), so that a caller can attach to it
// before any process is scanned.
func LoaderAt(path string) (*Hook, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nil, fmt.Errorf("stat loader: %w", err)
	}
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open loader: %w", err)
	}
	defer f.Close()
	ds, err := readDynsym(f)
	if err != nil {
		return nil, fmt.Errorf("read .dynsym of %s: %w", path, err)
	}
	off, err := funcOffset(f, ds, LoaderHookSymbol, path)
	if err != nil {
		return nil, err
	}
	return &Hook{Path: path, OpenPath: path, Offset: off, File: devName(st.Dev) + " " + strconv.FormatUint(st.Ino, 10)}, nil
}

// isLoader reports whether a mapped file may be a dynamic loader, the
// only files LoaderHookSymbol is looked up in: glibc's ld-linux-*.so.*
// (ld-*.so on some), musl's libc.
func isLoader(path string) bool {
	base := path[strings.LastIndexByte(path, '/')+1:]
	return strings.HasPrefix(base, "ld-") || isMuslLibc(path)
}

// interpOf returns f's PT_INTERP, "" without one.
func interpOf(f *elf.File) string {
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b, err := io.ReadAll(io.LimitReader(p.Open(), 4096))
			if err == nil {
				return strings.TrimRight(string(b), "\x00")
			}
		}
	}
	return ""
}

func statExe(pid int) (dev string, ino uint64, err error) {
	var st unix.Stat_t
	if err := unix.Stat(fmt.Sprintf("/proc/%d/exe", pid), &st); err != nil {
		return "", 0, fmt.Errorf("stat executable: %w", err)
	}
	return devName(st.Dev), st.Ino, nil
}

// devName formats a device number as /proc/PID/maps shows it.
func devName(dev uint64) string {
	return fmt.Sprintf("%02x:%02x", unix.Major(dev), unix.Minor(dev))
}

func serviceNameFromEnv(env []byte) string {
	var fromAttrs string
	// Only the two variables read are copied out of env: an environment
	// holds hundreds, and every new process is scanned.
	for len(env) > 0 {
		var kv []byte
		kv, env, _ = bytes.Cut(env, []byte{0})
		k, v, ok := bytes.Cut(kv, []byte{'='})
		if !ok {
			continue
		}
		switch string(k) {
		case "OTEL_SERVICE_NAME":
			if len(v) > 0 {
				return string(v)
			}
		case "OTEL_RESOURCE_ATTRIBUTES":
			for _, a := range strings.Split(string(v), ",") {
				if ak, av, ok := strings.Cut(strings.TrimSpace(a), "="); ok && ak == "service.name" {
					fromAttrs = av
				}
			}
		}
	}
	return fromAttrs
}
