package agent

import (
	"bytes"
	"crypto/x509"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// relocate stands a test-made file for a path of the Secret the pod
// mounts: it checks the deployed path is under /etc/spanprof/tls/ and
// returns the test's file.
func relocate(t *testing.T, deployed, local string) string {
	t.Helper()
	if !strings.HasPrefix(deployed, "/etc/spanprof/tls/") {
		t.Fatalf("TLS file %q is not in the mounted Secret /etc/spanprof/tls/", deployed)
	}
	return local
}

// The files under deploy/ are checked here: the collector configuration
// by the real collector's `validate`, the agent configuration by the
// agent's own loader, the manifests for what the agent needs.

func TestDeployCollectorConfigValidates(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the test collector")
	}
	root := repoRoot(t)
	col := buildTestCollector(t, root)
	cfg := filepath.Join(root, "deploy", "collector", "collector.yaml")
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"with the profiles feature gate", []string{"--feature-gates=service.profilesSupport"}, ""},
		{"without it the pipeline is refused", nil, "service.profilesSupport"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"validate", "--config", cfg}, tt.args...)
			out, err := exec.Command(col, args...).CombinedOutput()
			if tt.wantErr == "" && err != nil {
				t.Fatalf("validate: %v\n%s", err, out)
			}
			if tt.wantErr != "" && (err == nil || !bytes.Contains(out, []byte(tt.wantErr))) {
				t.Fatalf("validate: %v, want a failure naming %q\n%s", err, tt.wantErr, out)
			}
		})
	}
}

func TestDeployAgentConfig(t *testing.T) {
	root := repoRoot(t)
	cfg := Default()
	if err := LoadFile(filepath.Join(root, "deploy", "agent.yaml"), &cfg); err != nil {
		t.Fatal(err)
	}
	// The TLS files come from a Secret in the pod; made here instead.
	ca := newPKI(t, "deploy")
	tlsCfg := &cfg.Export.TLS
	tlsCfg.CAFile = relocate(t, tlsCfg.CAFile, ca.CAFile)
	cert, key := ca.issue(t, "agent", x509.ExtKeyUsageClientAuth)
	tlsCfg.CertFile, tlsCfg.KeyFile = relocate(t, tlsCfg.CertFile, cert), relocate(t, tlsCfg.KeyFile, key)
	if err := cfg.Validate(); err != nil {
		t.Fatalf("deploy/agent.yaml: %v", err)
	}
	if want := "spanprof-collector.spanprof.svc:4317"; !slices.Contains(cfg.Export.Endpoints, want) {
		t.Errorf("agent endpoints %v do not name the collector service %s", cfg.Export.Endpoints, want)
	}
	ds := findManifest(t, filepath.Join(root, "deploy", "kubernetes", "agent-daemonset.yaml"), "DaemonSet")
	if grace := time.Duration(intAt(t, ds, "spec", "template", "spec", "terminationGracePeriodSeconds")) * time.Second; grace <= cfg.Export.ShutdownTimeout {
		t.Errorf("terminationGracePeriodSeconds %v leaves no time for the %v flush", grace, cfg.Export.ShutdownTimeout)
	}
}

func TestDeployDaemonSet(t *testing.T) {
	root := repoRoot(t)
	ds := findManifest(t, filepath.Join(root, "deploy", "kubernetes", "agent-daemonset.yaml"), "DaemonSet")
	pod := at(t, ds, "spec", "template", "spec").(map[string]any)
	if pod["hostPID"] != true {
		t.Error("hostPID is not true: the agent would see only its own pod")
	}
	c := at(t, pod, "containers").([]any)[0].(map[string]any)
	sc := c["securityContext"].(map[string]any)
	if sc["privileged"] != false {
		t.Error("the agent runs privileged; it should use capabilities")
	}
	var caps []string
	for _, v := range at(t, sc, "capabilities", "add").([]any) {
		caps = append(caps, v.(string))
	}
	for _, want := range []string{"BPF", "PERFMON", "SYS_PTRACE"} {
		if !slices.Contains(caps, want) {
			t.Errorf("capability %s missing from %v", want, caps)
		}
	}
	mounts := map[string]bool{}
	for _, m := range c["volumeMounts"].([]any) {
		mounts[m.(map[string]any)["mountPath"].(string)] = true
	}
	for _, want := range []string{"/sys/fs/bpf", "/sys/kernel/btf", "/etc/spanprof"} {
		if !mounts[want] {
			t.Errorf("no volume mounted at %s", want)
		}
	}
	if at(t, c, "resources", "limits", "memory") == nil {
		t.Error("no memory limit")
	}
	args := strings.Join(anyStrings(c["args"]), " ")
	if !strings.Contains(args, "agent") || !strings.Contains(args, "/etc/spanprof/agent.yaml") {
		t.Errorf("container args %q do not run the agent with the mounted config", args)
	}

	col := findManifest(t, filepath.Join(root, "deploy", "kubernetes", "collector.yaml"), "Deployment")
	cc := at(t, col, "spec", "template", "spec", "containers").([]any)[0].(map[string]any)
	if !slices.Contains(anyStrings(cc["args"]), "--feature-gates=service.profilesSupport") {
		t.Errorf("collector args %v lack the profiles feature gate", cc["args"])
	}
	for _, f := range []string{"kustomization.yaml", "Dockerfile", "agent.yaml", "collector/collector.yaml"} {
		if _, err := os.Stat(filepath.Join(root, "deploy", f)); err != nil {
			t.Error(err)
		}
	}
}

// findManifest returns the first document of kind in a multi-document file.
func findManifest(t *testing.T, path, kind string) map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			t.Fatalf("%s: no %s", path, kind)
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if doc["kind"] == kind {
			return doc
		}
	}
}

func at(t *testing.T, v any, path ...string) any {
	t.Helper()
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("no %s in %v", k, path)
		}
		v = m[k]
	}
	return v
}

func intAt(t *testing.T, v any, path ...string) int {
	t.Helper()
	n, ok := at(t, v, path...).(int)
	if !ok {
		t.Fatalf("%v is not a number", path)
	}
	return n
}

func anyStrings(v any) []string {
	var out []string
	l, _ := v.([]any)
	for _, x := range l {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}
