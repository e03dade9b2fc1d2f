package check

import "testing"

func TestCollectorInKubernetesManifests(t *testing.T) {
	tests := []struct {
		name  string
		yaml  string
		rules []string // rule ids expected, in order
		line  int      // line of the first finding
	}{
		{"deployment only", "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: c\n", nil, 0},
		{"configmap with profiles pipeline", `apiVersion: v1
kind: ConfigMap
data:
  config.yaml: |
    receivers:
      otlp:
        protocols:
          grpc:
    exporters:
      debug: {}
    service:
      pipelines:
        profiles:
          receivers: [otlp]
          exporters: [debug]
`, []string{"collector-feature-gate"}, 13},
		{"configmap without profiles", `apiVersion: v1
kind: ConfigMap
data:
  config.yaml: |
    receivers:
      otlp: {}
    service:
      pipelines:
        traces:
          receivers: [otlp]
---
apiVersion: apps/v1
kind: Deployment
`, []string{"collector-no-profiles-pipeline", "collector-feature-gate"}, 9},
		{"configmap with other data", "apiVersion: v1\nkind: ConfigMap\ndata:\n  motd: hello\n", nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs, err := checkCollector("c.yaml", []byte(tt.yaml))
			if err != nil {
				t.Fatal(err)
			}
			if len(fs) != len(tt.rules) {
				t.Fatalf("findings %+v, want rules %v", fs, tt.rules)
			}
			for i, f := range fs {
				if f.Rule != tt.rules[i] {
					t.Fatalf("finding %d is %s, want %s", i, f.Rule, tt.rules[i])
				}
			}
			if len(fs) > 0 && fs[0].Line != tt.line {
				t.Fatalf("first finding on line %d, want %d", fs[0].Line, tt.line)
			}
		})
	}
}
