package flamegraph

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"strings"

	"github.com/spanprof/spanprof/internal/profile"
)

// assets holds the viewer. The JS files are concatenated in scriptOrder
// into one inline <script>, so the page loads nothing from the network.
//
//go:embed assets/viewer.css assets/*.js
var assets embed.FS

// scriptOrder lists the viewer scripts in load order: later files use
// what earlier ones define.
var scriptOrder = []string{"data.js", "flame.js", "timeline.js", "app.js"}

// ContentSecurityPolicy allows the page its inline script and style and
// nothing else: no fetch, no image, no font from anywhere. The page
// carries it in a <meta> element and servers send it as a header.
const ContentSecurityPolicy = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:"

// LiveContentSecurityPolicy is the policy of a live page (serve
// --otlp-listen): the same, plus fetches from its own server, which the
// page polls for new data.
const LiveContentSecurityPolicy = ContentSecurityPolicy + "; connect-src 'self'"

// Page describes what surrounds the data in one viewer page.
type Page struct {
	// Title is shown in the browser tab and the header.
	Title string
	// Files lists the profiles a server offers, for the file picker; empty
	// for a standalone page.
	Files []string
	// Current is the entry of Files this page shows.
	Current string
	// Live marks a page of a live window: it polls /api/window, links
	// spans to /trace/TRACE_ID and carries LiveContentSecurityPolicy.
	Live bool
}

// Policy returns the Content-Security-Policy of the page.
func (pg Page) Policy() string {
	if pg.Live {
		return LiveContentSecurityPolicy
	}
	return ContentSecurityPolicy
}

// Write writes p as a self-contained HTML page (the `.html` output).
func Write(w io.Writer, p *profile.Profile) error {
	data, err := NewData(p).Encode()
	if err != nil {
		return err
	}
	return WritePage(w, data, Page{Title: "spanprof " + p.Start.UTC().Format("2006-01-02 15:04:05 UTC")})
}

// WritePage writes the viewer page around data, the output of
// Data.Encode.
func WritePage(w io.Writer, data []byte, pg Page) error {
	css, js, err := inlineAssets()
	if err != nil {
		return err
	}
	meta, err := json.Marshal(struct {
		Files   []string `json:"files"`
		Current string   `json:"current"`
		Live    bool     `json:"live,omitempty"`
	}{pg.Files, pg.Current, pg.Live})
	if err != nil {
		return fmt.Errorf("encode page metadata: %w", err)
	}
	var b bytes.Buffer
	b.Grow(len(data) + len(js) + len(css) + 4096)
	b.WriteString("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n")
	b.WriteString("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n")
	fmt.Fprintf(&b, "<meta http-equiv=\"Content-Security-Policy\" content=\"%s\">\n", pg.Policy())
	fmt.Fprintf(&b, "<title>%s</title>\n<style>\n%s</style>\n</head>\n<body>\n", html.EscapeString(pg.Title), css)
	fmt.Fprintf(&b, body, html.EscapeString(pg.Title))
	b.WriteString("<script type=\"application/json\" id=\"spanprof-meta\">")
	b.Write(meta)
	b.WriteString("</script>\n<script type=\"application/json\" id=\"spanprof-data\">")
	b.Write(data)
	b.WriteString("</script>\n<script>\n")
	b.WriteString(js)
	b.WriteString("</script>\n</body>\n</html>\n")
	if _, err := w.Write(b.Bytes()); err != nil {
		return fmt.Errorf("write html page: %w", err)
	}
	return nil
}

func inlineAssets() (css, js string, err error) {
	c, err := assets.ReadFile("assets/viewer.css")
	if err != nil {
		return "", "", fmt.Errorf("read viewer css: %w", err)
	}
	var sb strings.Builder
	for _, name := range scriptOrder {
		s, err := assets.ReadFile("assets/" + name)
		if err != nil {
			return "", "", fmt.Errorf("read viewer script: %w", err)
		}
		if bytes.Contains(bytes.ToLower(s), []byte("</script")) {
			return "", "", fmt.Errorf("read viewer script %s: contains </script", name)
		}
		fmt.Fprintf(&sb, "// %s\n", name)
		sb.Write(s)
		sb.WriteByte('\n')
	}
	return string(c), sb.String(), nil
}

// body is the static markup; the scripts fill the canvases and lists.
const body = `<header>
  <h1>%s</h1>
  <select id="file" title="profile file" hidden></select>
  <span class="kind" role="radiogroup">
    <label><input type="radio" name="kind" value="on" checked> on-CPU</label>
    <label id="kind-off-label"><input type="radio" name="kind" value="off"> off-CPU</label>
  </span>
  <input id="search" type="search" placeholder="search functions (regexp)" size="24">
  <button id="reset" type="button">reset</button>
</header>
<section class="filters">
  <label>trace_id <input id="f-trace" size="34" spellcheck="false"></label>
  <label>span_id <input id="f-span" size="18" spellcheck="false"></label>
  <label>process <select id="f-pid"><option value="">all</option></select></label>
  <label>thread <select id="f-tid"><option value="">all</option></select></label>
  <span id="f-time"></span>
</section>
<p id="status" class="status"></p>
<section class="panel">
  <h2>Span timeline <small>ticks coloured by span; click a tick to filter by its span, drag to select a time range, double-click to clear it</small></h2>
  <div id="timeline-wrap"><canvas id="timeline"></canvas></div>
</section>
<section class="panel">
  <h2>Flame graph <small id="flame-info">click a frame to zoom, click the root to reset</small></h2>
  <div id="flame-wrap"><canvas id="flame"></canvas></div>
</section>
<section class="panel">
  <h2>Spans <small id="span-info"></small></h2>
  <div id="spans-wrap"><table id="spans"><thead><tr><th>trace_id</th><th>span_id</th><th>threads</th><th>first sample</th><th>last sample</th><th>on-CPU samples</th><th>off-CPU</th></tr></thead><tbody></tbody></table></div>
</section>
<div id="tip" hidden></div>
<footer id="perf"></footer>
`
