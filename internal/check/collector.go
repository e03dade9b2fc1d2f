package check

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"go.yaml.in/yaml/v3"
)

// checkCollector reads an OpenTelemetry Collector configuration and wants
// a profiles pipeline fed by an OTLP receiver. It works on the YAML node
// tree so findings carry line numbers.
//
// Files named like collector configurations are often Kubernetes manifests
// instead: a ConfigMap's data entries that hold a collector configuration
// are checked (with line numbers in the manifest), other Kubernetes
// objects are skipped.
func checkCollector(target string, data []byte) ([]Finding, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []*yaml.Node
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("parse collector config %s: %w", target, err)
		}
		root := &doc
		if root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
			root = root.Content[0]
		}
		docs = append(docs, root)
	}
	if len(docs) == 0 {
		return checkCollectorRoot(target, &yaml.Node{Kind: yaml.ScalarNode}, 0), nil
	}
	var out []Finding
	kubernetes := 0
	for _, root := range docs {
		if mapValue(root, "apiVersion") == nil || mapValue(root, "kind") == nil {
			out = append(out, checkCollectorRoot(target, root, 0)...)
			continue
		}
		kubernetes++
		if mapValue(root, "kind").Value != "ConfigMap" {
			continue
		}
		entries := mapValue(root, "data")
		if entries == nil || entries.Kind != yaml.MappingNode {
			continue
		}
		for i := 0; i+1 < len(entries.Content); i += 2 {
			val := entries.Content[i+1]
			var inner yaml.Node
			if yaml.Unmarshal([]byte(val.Value), &inner) != nil || len(inner.Content) == 0 {
				continue
			}
			r := inner.Content[0]
			if mapValue(r, "service") == nil && mapValue(r, "receivers") == nil {
				continue // not a collector configuration
			}
			// A block scalar's content starts on the line after its key.
			out = append(out, checkCollectorRoot(target, r, val.Line)...)
		}
	}
	return out, nil
}

// checkCollectorRoot checks one collector configuration document; lineBase
// is added to its line numbers when it is embedded in another file.
func checkCollectorRoot(target string, root *yaml.Node, lineBase int) []Finding {
	fs := checkCollectorDoc(target, root)
	for i := range fs {
		if fs[i].Line > 0 {
			fs[i].Line += lineBase
		}
	}
	return fs
}

func checkCollectorDoc(target string, root *yaml.Node) []Finding {
	gate := newFinding("collector-feature-gate", target, target, 0,
		"profiles pipelines are behind a feature gate; the collector refuses them without --feature-gates=service.profilesSupport")
	if root.Kind != yaml.MappingNode {
		return []Finding{newFinding("collector-no-profiles-pipeline", target, target, 1, "the file is not a YAML mapping"), gate}
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
		return []Finding{newFinding("collector-no-profiles-pipeline", target, target, line, "service.pipelines is missing"), gate}
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
		} else if f, ok := otlpWithoutGRPC(target, root, key.Value, mapValue(val, "receivers")); ok {
			out = append(out, f)
		}
		out = append(out, undefinedComponents(target, root, key.Value, val)...)
	}
	if !found {
		out = append(out, newFinding("collector-no-profiles-pipeline", target, target, line,
			"service.pipelines has no profiles pipeline (key profiles or profiles/NAME)"))
	}
	return append(out, gate)
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

// otlpWithoutGRPC finds a profiles pipeline whose otlp receivers all lack
// the grpc protocol: the agent exports OTLP over gRPC only, so an
// http-only receiver refuses every export.
func otlpWithoutGRPC(target string, root *yaml.Node, pipeline string, list *yaml.Node) (Finding, bool) {
	defs := mapValue(root, "receivers")
	var httpOnly *yaml.Node
	for _, r := range deref(list).Content {
		r = deref(r)
		if r.Value != "otlp" && !strings.HasPrefix(r.Value, "otlp/") {
			continue
		}
		def := mapValue(defs, r.Value)
		if def == nil {
			return Finding{}, false // reported as undefined
		}
		if mapValue(mapValue(def, "protocols"), "grpc") != nil {
			return Finding{}, false
		}
		httpOnly = r
	}
	if httpOnly == nil {
		return Finding{}, false
	}
	return newFinding("collector-otlp-no-grpc", target, target, httpOnly.Line,
		"pipeline %q receives OTLP only over http (receiver %s has no protocols.grpc); the agent exports over gRPC", pipeline, httpOnly.Value), true
}

// undefinedComponents finds the receivers, processors and exporters a
// pipeline names that no top-level section defines: the collector
// refuses to start with them. A connector serves as receiver or exporter.
func undefinedComponents(target string, root *yaml.Node, pipeline string, p *yaml.Node) []Finding {
	var out []Finding
	for _, kind := range []string{"receivers", "processors", "exporters"} {
		list := mapValue(p, kind)
		if list == nil || list.Kind != yaml.SequenceNode {
			continue
		}
		for _, c := range list.Content {
			c = deref(c)
			if mapHasKey(mapValue(root, kind), c.Value) || kind != "processors" && mapHasKey(mapValue(root, "connectors"), c.Value) {
				continue
			}
			out = append(out, newFinding("collector-undefined-component", target, target, c.Line,
				"pipeline %q names %s %q, which the top-level %s section does not define", pipeline, strings.TrimSuffix(kind, "s"), c.Value, kind))
		}
	}
	return out
}

// mapHasKey reports whether the mapping n has key, whatever its value
// (`debug:` with no value defines a component too).
func mapHasKey(n *yaml.Node, key string) bool {
	n = deref(n)
	if n == nil || n.Kind != yaml.MappingNode {
		return false
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return true
		}
	}
	return false
}
