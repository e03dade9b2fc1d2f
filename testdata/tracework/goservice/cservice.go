package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"

	spanprof "github.com/spanprof/spanprof/sdk/go"
	"go.opentelemetry.io/otel/propagation"
)

// cService calls the C service over HTTP. The C service exports its own
// span (OTLP/HTTP to the collector); this side prints its ground truth.
type cService struct {
	url    string
	client *http.Client
}

func newCService(url string) *cService {
	// The transport's connection goroutines would otherwise inherit the
	// span of the request that dialed and keep it, parked, after it ends.
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = spanprof.DetachDial((&net.Dialer{}).DialContext)
	return &cService{url: strings.TrimSuffix(url, "/"), client: &http.Client{Transport: t}}
}

// call runs GET /work with the caller's span in traceparent and prints
// the C span's ground truth from the answer.
func (c *cService) call(ctx context.Context, cpuMS, sleepMS int) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/work?cpu_ms=%d&sleep_ms=%d", c.url, cpuMS, sleepMS), nil)
	if err != nil {
		return fmt.Errorf("build c-service request: %w", err)
	}
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
	resp, err := c.client.Do(req)
	if err != nil {
		return fmt.Errorf("call c-service: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("call c-service: %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return c.parse(body)
}

// callNext runs GET URL?query with the caller's span in traceparent; the
// next service prints its own ground truth.
func (c *cService) callNext(ctx context.Context, query string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url+"?"+query, nil)
	if err != nil {
		return fmt.Errorf("build next request: %w", err)
	}
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
	resp, err := c.client.Do(req)
	if err != nil {
		return fmt.Errorf("call next service: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("call next service: %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// parse prints the C span's ground truth from its answer.
func (c *cService) parse(body []byte) error {
	var sidHex string
	var startNs, endNs, cpu, slept, run int64
	if _, err := fmt.Sscan(string(body), &sidHex, &startNs, &endNs, &cpu, &slept, &run); err != nil {
		return fmt.Errorf("parse c-service answer %q: %w", body, err)
	}
	fmt.Printf("truth %s c-work %d %d %d\n", sidHex, cpu, slept, run)
	return nil
}
