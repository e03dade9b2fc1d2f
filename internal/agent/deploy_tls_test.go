package agent

import (
	"crypto/x509"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// TestDeploySafeDefaults: the deploy files speak mutual TLS by default and
// the metrics and OTLP ports answer only whom they are meant for.
func TestDeploySafeDefaults(t *testing.T) {
	root := repoRoot(t)
	cfg := Default()
	if err := LoadFile(filepath.Join(root, "deploy", "agent.yaml"), &cfg); err != nil {
		t.Fatal(err)
	}
	tls := cfg.Export.TLS
	if tls.Insecure || tls.CAFile == "" || tls.CertFile == "" || tls.KeyFile == "" {
		t.Errorf("deploy/agent.yaml export.tls %+v: want mutual TLS (ca_file, cert_file, key_file)", tls)
	}
	col := readYAML(t, filepath.Join(root, "deploy", "collector", "collector.yaml"))
	rtls, _ := at(t, col, "receivers", "otlp", "protocols", "grpc", "tls").(map[string]any)
	if rtls["cert_file"] == nil || rtls["client_ca_file"] == nil {
		t.Errorf("collector receiver tls %v: want cert_file and client_ca_file (mutual TLS)", rtls)
	}
	for _, tt := range []struct {
		file, policy string
		port         int
	}{
		{"agent-daemonset.yaml", "spanprof-agent-metrics", 9464},
		{"collector.yaml", "spanprof-collector-otlp", 4317},
	} {
		np := findManifest(t, filepath.Join(root, "deploy", "kubernetes", tt.file), "NetworkPolicy")
		if at(t, np, "metadata", "name") != tt.policy {
			t.Errorf("%s: NetworkPolicy %v, want %s", tt.file, at(t, np, "metadata", "name"), tt.policy)
		}
		rules, _ := at(t, np, "spec", "ingress").([]any)
		if len(rules) == 0 {
			t.Errorf("%s: no ingress rule (all traffic refused, probes included)", tt.policy)
		}
		for _, r := range rules {
			from, _ := r.(map[string]any)["from"].([]any)
			if len(from) == 0 {
				t.Errorf("%s: an ingress rule without from admits everyone", tt.policy)
			}
			ports, _ := r.(map[string]any)["ports"].([]any)
			if len(ports) != 1 || ports[0].(map[string]any)["port"] != tt.port {
				t.Errorf("%s: ports %v, want only %d", tt.policy, ports, tt.port)
			}
		}
	}
}

func readYAML(t *testing.T, path string) map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var doc map[string]any
	if err := yaml.NewDecoder(f).Decode(&doc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return doc
}

// TestDeployTLSInteroperates runs the real collector with
// deploy/collector/collector.yaml and the agent's exporter with the TLS
// settings of deploy/agent.yaml, certificates made here standing for the
// Secrets: a batch must pass, and a client without a certificate must not.
func TestDeployTLSInteroperates(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the test collector")
	}
	root := repoRoot(t)
	colBin := buildTestCollector(t, root)
	cfg := Default()
	if err := LoadFile(filepath.Join(root, "deploy", "agent.yaml"), &cfg); err != nil {
		t.Fatal(err)
	}
	ca := newPKI(t, "deploy")
	srvCert, srvKey := ca.issue(t, cfg.Export.TLS.ServerName, x509.ExtKeyUsageServerAuth)
	cliCert, cliKey := ca.issue(t, "agent.spanprof", x509.ExtKeyUsageClientAuth)

	colCfg, err := os.ReadFile(filepath.Join(root, "deploy", "collector", "collector.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	text := strings.NewReplacer(
		"/etc/otelcol/tls/tls.crt", srvCert, "/etc/otelcol/tls/tls.key", srvKey, "/etc/otelcol/tls/ca.crt", ca.CAFile,
		"0.0.0.0:4317", addr,
		"level: basic", "level: none", // no telemetry port to collide with
	).Replace(string(colCfg))
	path := filepath.Join(t.TempDir(), "collector.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	col := exec.Command(colBin, "--config", path, "--feature-gates=service.profilesSupport")
	col.Env = append(os.Environ(), "PROFILES_BACKEND_ENDPOINT="+freeAddr(t), "PROFILES_BACKEND_INSECURE=true")
	col.Stdout, col.Stderr = &logs, &logs
	if err := col.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = col.Process.Signal(syscall.SIGTERM)
		_ = col.Wait()
		if t.Failed() {
			t.Logf("collector output:\n%s", logs.String())
		}
	})
	waitFor(t, "collector listening", 30*time.Second, func() bool { return strings.Contains(logs.String(), "Everything is ready") })

	exp := fastExport()
	exp.TLS = cfg.Export.TLS
	exp.TLS.CAFile, exp.TLS.CertFile, exp.TLS.KeyFile = ca.CAFile, cliCert, cliKey
	e, _ := newTestExporter(t, addr, exp)
	if err := e.send(testBatch(t, 4242, 9)); err != nil {
		t.Fatalf("send with the deployed TLS settings: %v", err)
	}
	// The debug exporter logs each batch it gets.
	seen := regexp.MustCompile(`Profiles.*"resource profiles": 1, "sample records": 1}`) // 9 events, one stack
	waitFor(t, "the batch in the collector's debug log", 10*time.Second, func() bool { return seen.MatchString(logs.String()) })

	exp.TLS.CertFile, exp.TLS.KeyFile = "", ""
	e2, _ := newTestExporter(t, addr, exp)
	if err := e2.send(testBatch(t, 4243, 5)); err == nil {
		t.Fatal("a client without a certificate was heard")
	} else {
		t.Logf("refused without a client certificate: %v", err)
	}
}
