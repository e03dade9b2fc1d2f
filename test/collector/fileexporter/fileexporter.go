// Package fileexporter is a collector exporter that appends every batch of
// profiles it receives to a file as one line of OTLP/JSON. The
// contrib file exporter does the same but drags in contrib's dependency
// tree; this one needs only core modules.
package fileexporter

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/xexporter"
	"go.opentelemetry.io/collector/pdata/pprofile"
)

// Config names the output file.
type Config struct {
	Path string `mapstructure:"path"`
}

// Validate rejects a config without a path.
func (c *Config) Validate() error {
	if c.Path == "" {
		return errors.New("path must be set")
	}
	return nil
}

// NewFactory returns the factory of the "profilefile" exporter.
func NewFactory() xexporter.Factory {
	return xexporter.NewFactory(
		component.MustNewType("profilefile"),
		func() component.Config { return &Config{} },
		xexporter.WithProfiles(create, component.StabilityLevelDevelopment),
	)
}

func create(_ context.Context, _ exporter.Settings, cfg component.Config) (xexporter.Profiles, error) {
	return &fileExporter{path: cfg.(*Config).Path}, nil
}

type fileExporter struct {
	path string
	mu   sync.Mutex
	f    *os.File
}

func (e *fileExporter) Start(context.Context, component.Host) error {
	f, err := os.OpenFile(e.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open %s: %w", e.path, err)
	}
	e.f = f
	return nil
}

func (e *fileExporter) Shutdown(context.Context) error {
	if e.f == nil {
		return nil
	}
	return e.f.Close()
}

func (e *fileExporter) Capabilities() consumer.Capabilities {
	return consumer.Capabilities{MutatesData: false}
}

// ConsumeProfiles writes pd as one JSON line; the write is a single
// syscall so a reader never sees half a line.
func (e *fileExporter) ConsumeProfiles(_ context.Context, pd pprofile.Profiles) error {
	var m pprofile.JSONMarshaler
	buf, err := m.MarshalProfiles(pd)
	if err != nil {
		return fmt.Errorf("marshal profiles: %w", err)
	}
	buf = append(buf, '\n')
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, err := e.f.Write(buf); err != nil {
		return fmt.Errorf("write %s: %w", e.path, err)
	}
	return nil
}
