package check

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// checkCollector reads an OpenTelemetry Collector configuration and wants
// a profiles pipeline fed by an OTLP receiver. It works on the YAML node
// tree so findings carry line numbers.
func checkCollector(target string, data []byte) ([]Finding, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("parse collector config %s: %w", target, err)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
		root = root.Content[0]
	}
	gate := newFinding("collector-feature-gate", target, target, 0,
		"profiles pipelines are behind a feature gate; the collector refuses them without --feature-gates=service.profilesSupport")
	if root.Kind != yaml.MappingNode {
		return []Finding{newFinding("collector-no-profiles-pipeline", target, target, 1, "the file is not a YAML mapping"), gate}, nil
	}
	service := mapValue(root, "service")
	pipelines := mapValue(service, "pipelines")
	line := 1
	switch {
	case pipelines != nil:
		line = pipelines.Line
	case service != nil:
		line = service.Line
	}
	if pipelines == nil || pipelines.Kind != yaml.MappingNode {
		return []Finding{newFinding("collector-no-profiles-pipeline", target, target, line, "service.pipelines is missing"), gate}, nil
	}
	var out []Finding
	found := false
	for i := 0; i+1 < len(pipelines.Content); i += 2 {
		key, val := pipelines.Content[i], pipelines.Content[i+1]
		if key.Value != "profiles" && !strings.HasPrefix(key.Value, "profiles/") {
			continue
		}
		found = true
		gate.Line = key.Line
		if !hasOTLP(mapValue(val, "receivers")) {
			out = append(out, newFinding("collector-profiles-no-otlp", target, target, key.Line,
				"pipeline %q has no otlp receiver, so the agent's OTLP export has nowhere to go", key.Value))
		}
	}
	if !found {
		out = append(out, newFinding("collector-no-profiles-pipeline", target, target, line,
			"service.pipelines has no profiles pipeline (key profiles or profiles/NAME)"))
	}
	return append(out, gate), nil
}

// mapValue returns the value of key in a mapping node, or nil.
func mapValue(n *yaml.Node, key string) *yaml.Node {
	n = deref(n)
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return deref(n.Content[i+1])
		}
	}
	return nil
}

// hasOTLP reports whether a receivers list names otlp or otlp/NAME.
func hasOTLP(list *yaml.Node) bool {
	list = deref(list)
	if list == nil || list.Kind != yaml.SequenceNode {
		return false
	}
	for _, r := range list.Content {
		r = deref(r)
		if r.Value == "otlp" || strings.HasPrefix(r.Value, "otlp/") {
			return true
		}
	}
	return false
}

// deref follows YAML aliases (receivers: *common) a few levels.
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 8; i++ {
		n = n.Alias
	}
	return n
}
