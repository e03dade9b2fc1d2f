package tracectx

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestFindElasticContext builds a library defining Elastic APM's
// correlation pointer the way the agent's JVMTI library does (a TLSDESC
// access from a shared object) and looks it up by name.
func TestFindElasticContext(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not installed")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "elastic.c")
	lib := filepath.Join(dir, "libelastic.so")
	code := "__thread void *" + ElasticContextSymbol + ";\n" +
		"void **corr_addr(void) { return &" + ElasticContextSymbol + "; }\n"
	if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-O2", "-fPIC", "-shared", "-mtls-dialect=gnu2", "-o", lib, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	v, err := FindTLSVar(lib, ElasticContextSymbol)
	if err != nil {
		t.Fatal(err)
	}
	if !v.Defined || v.Executable || v.Symbol != ElasticContextSymbol || v.TLSMemsz < 8 {
		t.Errorf("%+v", v)
	}
	var desc bool
	for _, r := range v.Relocs {
		desc = desc || r.Kind == RelocTLSDesc
	}
	if !desc {
		t.Errorf("relocations %v, want a TLSDESC slot", v.Relocs)
	}
	if _, err := FindThreadContext(lib); !errors.Is(err, ErrNotFound) {
		t.Errorf("FindThreadContext of a library without %s: %v, want ErrNotFound", ThreadContextSymbol, err)
	}
	if _, err := FindTLSVar(lib, "no_such_tls"); !errors.Is(err, ErrNotFound) {
		t.Errorf("FindTLSVar of an absent name: %v, want ErrNotFound", err)
	}
	// An unresolvable variable names itself in the error.
	if _, err := Resolve(emptyMem{}, v, 0, false); err == nil || !strings.Contains(err.Error(), ElasticContextSymbol) {
		t.Errorf("Resolve with no memory: %v, want an error naming %s", err, ElasticContextSymbol)
	}
}

type emptyMem struct{}

func (emptyMem) ReadAt(p []byte, off int64) (int, error) { return 0, errors.New("no memory") }
