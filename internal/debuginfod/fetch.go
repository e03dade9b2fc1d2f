package debuginfod

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
)

// fetchFrom downloads one build ID from one server into the cache. The
// body goes to a temporary file that is verified before it is renamed
// into place, so the cache never holds a partial or foreign file.
func (c *Client) fetchFrom(ctx context.Context, base, buildID string) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	url := strings.TrimRight(base, "/") + "/buildid/" + buildID + "/debuginfo"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		c.httpErrors.Add(1)
		return fmt.Errorf("make request %s: %w", url, err)
	}
	req.Header.Set("User-Agent", "spanprof")
	resp, err := c.http.Do(req)
	if err != nil {
		return c.transportError(ctx, url, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("get %s: %w", url, ErrNotFound)
	case resp.StatusCode != http.StatusOK:
		c.httpErrors.Add(1)
		return fmt.Errorf("get %s: status %s", url, resp.Status)
	case resp.ContentLength > c.opts.MaxFileBytes:
		c.invalid.Add(1)
		return fmt.Errorf("get %s: %d bytes over the %d bound", url, resp.ContentLength, c.opts.MaxFileBytes)
	}
	tmp, err := c.cache.tempFile(buildID)
	if err != nil {
		c.httpErrors.Add(1)
		return err
	}
	defer os.Remove(tmp.Name()) // after a rename, a no-op
	n, err := io.Copy(tmp, io.LimitReader(resp.Body, c.opts.MaxFileBytes+1))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return c.transportError(ctx, url, err)
	}
	if n > c.opts.MaxFileBytes {
		c.invalid.Add(1)
		return fmt.Errorf("get %s: body over the %d byte bound", url, c.opts.MaxFileBytes)
	}
	if err := c.opts.Verify(tmp.Name(), buildID); err != nil {
		c.invalid.Add(1)
		return fmt.Errorf("verify %s: %w", url, err)
	}
	return c.cache.put(buildID, tmp.Name(), n)
}

// transportError counts a failed connection or body read as a timeout
// when the per-request deadline caused it.
func (c *Client) transportError(ctx context.Context, url string, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
		c.timeouts.Add(1)
		return fmt.Errorf("get %s: timed out after %v: %w", url, c.opts.Timeout, err)
	}
	c.httpErrors.Add(1)
	return fmt.Errorf("get %s: %w", url, err)
}
