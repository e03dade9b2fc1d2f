package agent

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"
)

// pki is a certificate authority made for one test, with the files of
// what it issued.
type pki struct {
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// CAFile is the CA certificate in PEM.
	CAFile string
}

func newPKI(t *testing.T, name string) *pki {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	p := &pki{dir: t.TempDir(), cert: cert, key: key}
	p.CAFile = p.write(t, name+"-ca.crt", "CERTIFICATE", der)
	return p
}

func (p *pki) write(t *testing.T, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// issue signs a leaf certificate for dnsName with the given usage and
// returns its certificate and key files.
func (p *pki) issue(t *testing.T, dnsName string, usage x509.ExtKeyUsage) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: dnsName},
		DNSNames:     []string{dnsName},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.cert, &key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return p.write(t, dnsName+".crt", "CERTIFICATE", der), p.write(t, dnsName+".key", "PRIVATE KEY", kder)
}

const tlsCollectorConfig = `receivers:
  otlp:
    protocols:
      grpc:
        endpoint: %s
        tls:
          cert_file: %s
          key_file: %s
%s
exporters:
  profilefile:
    path: %s
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    profiles:
      receivers: [otlp]
      exporters: [profilefile]
`

// startTLSCollector runs the real collector with a TLS receiver (mutual
// TLS when clientCA is set) and returns its address and output file.
func startTLSCollector(t *testing.T, certFile, keyFile, clientCA string) (addr, out string) {
	t.Helper()
	col := buildTestCollector(t, repoRoot(t))
	dir := t.TempDir()
	addr, out = freeAddr(t), filepath.Join(dir, "profiles.jsonl")
	extra := ""
	if clientCA != "" {
		extra = "          client_ca_file: " + clientCA
	}
	cfg := filepath.Join(dir, "collector.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(tlsCollectorConfig, addr, certFile, keyFile, extra, out)), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	cmd := exec.Command(col, "--config", cfg, "--feature-gates=service.profilesSupport")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("collector output:\n%s", logs.String())
		}
	})
	waitFor(t, "collector listening", 30*time.Second, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return addr, out
}

// TestExporterTLS sends batches to the real collector over TLS and mutual
// TLS with certificates made here, and checks what each combination of
// the agent's TLS options gets: delivery into the collector's pipeline,
// or a refusal for a wrong CA, a wrong name, plaintext, or a missing or
// foreign client certificate.
func TestExporterTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the test collector")
	}
	const serverName = "collector.spanprof.test" // not the address dialled: server_name must say it
	ca := newPKI(t, "spanprof-test")
	other := newPKI(t, "someone-else")
	srvCert, srvKey := ca.issue(t, serverName, x509.ExtKeyUsageServerAuth)
	cliCert, cliKey := ca.issue(t, "agent.spanprof.test", x509.ExtKeyUsageClientAuth)
	foreignCert, foreignKey := other.issue(t, "intruder.spanprof.test", x509.ExtKeyUsageClientAuth)

	tlsAddr, tlsOut := startTLSCollector(t, srvCert, srvKey, "")
	mtlsAddr, mtlsOut := startTLSCollector(t, srvCert, srvKey, ca.CAFile)

	tests := []struct {
		name    string
		addr    string
		out     string
		tls     TLS
		wantErr string // in the error of the refused send; "" delivers
	}{
		{"TLS", tlsAddr, tlsOut, TLS{CAFile: ca.CAFile, ServerName: serverName}, ""},
		{"TLS, collector's CA unknown", tlsAddr, tlsOut, TLS{CAFile: other.CAFile, ServerName: serverName}, "certificate signed by unknown authority"},
		{"TLS, system pool", tlsAddr, tlsOut, TLS{ServerName: serverName}, "certificate signed by unknown authority"},
		{"TLS, name not in the certificate", tlsAddr, tlsOut, TLS{CAFile: ca.CAFile}, "doesn't contain any IP SANs"},
		{"plaintext to TLS", tlsAddr, tlsOut, TLS{Insecure: true}, "Unavailable"},
		{"mTLS", mtlsAddr, mtlsOut, TLS{CAFile: ca.CAFile, ServerName: serverName, CertFile: cliCert, KeyFile: cliKey}, ""},
		{"mTLS, no client certificate", mtlsAddr, mtlsOut, TLS{CAFile: ca.CAFile, ServerName: serverName}, "Unavailable"},
		{"mTLS, client certificate of another CA", mtlsAddr, mtlsOut, TLS{CAFile: ca.CAFile, ServerName: serverName, CertFile: foreignCert, KeyFile: foreignKey}, "Unavailable"},
	}
	pid := uint32(4000)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := fastExport()
			cfg.TLS = tt.tls
			e, _ := newTestExporter(t, tt.addr, cfg)
			pid++
			b := testBatch(t, pid, 7)
			err := e.send(b)
			if tt.wantErr != "" {
				if err == nil {
					t.Fatal("sent; want a refusal")
				}
				t.Logf("refused: %v", err)
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %q, want it to say %q", err, tt.wantErr)
				}
				if got := pidBatches(t, tt.out, pid); got != 0 {
					t.Fatalf("refused, yet the collector wrote %d batches of pid %d", got, pid)
				}
				return
			}
			if err != nil {
				t.Fatalf("send: %v", err)
			}
			waitFor(t, "the batch in the collector's output", 10*time.Second, func() bool { return pidBatches(t, tt.out, pid) == 1 })
		})
	}
}

// pidBatches counts the batches in the collector's output file holding a
// resource of pid.
func pidBatches(t *testing.T, path string, pid uint32) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if line == "" {
			continue
		}
		pd, err := (&pprofile.JSONUnmarshaler{}).UnmarshalProfiles([]byte(line))
		if err != nil {
			t.Fatalf("unmarshal batch: %v", err)
		}
		for _, rp := range pd.ResourceProfiles().All() {
			if v, ok := rp.Resource().Attributes().Get("process.pid"); ok && v.Int() == int64(pid) {
				n++
				break
			}
		}
	}
	return n
}
