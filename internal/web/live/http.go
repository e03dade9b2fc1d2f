package live

import (
	"bytes"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/spanprof/spanprof/internal/export/flamegraph"
	"github.com/spanprof/spanprof/internal/profile"
)

//go:embed assets/trace.css assets/trace.js
var assets embed.FS

// Handler serves the trace pages and the JSON API of a window, and hands
// every other path to next (the flame graph page of the whole window):
//
//	GET /trace/                          the trace list page
//	GET /trace/TRACE_ID                  the trace view page
//	GET /api/window                      Stats
//	GET /api/traces?limit=N              []TraceSummary, newest first
//	GET /api/trace/TRACE_ID              TraceView
//	GET /api/trace/TRACE_ID/flame?span_id=HEX&kind=on|off   FlameNode
type Handler struct {
	store Backend
	next  http.Handler
	log   *slog.Logger
}

// NewHandler returns the handler of store in front of next.
func NewHandler(store Backend, next http.Handler, log *slog.Logger) *Handler {
	return &Handler{store: store, next: next, log: log}
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	switch {
	case p == "/api/window":
		h.json(w, h.store.Stats())
	case p == "/api/traces":
		limit, err := strconv.Atoi(r.URL.Query().Get("limit"))
		if err != nil {
			limit = 1000
		}
		list, err := h.store.TraceList(limit)
		if err != nil {
			h.unavailable(w, err)
			return
		}
		h.json(w, list)
	case strings.HasPrefix(p, "/api/trace/"):
		h.apiTrace(w, r, strings.TrimPrefix(p, "/api/trace/"))
	case p == "/trace" || p == "/trace/":
		h.page(w, "spanprof · traces", "")
	case strings.HasPrefix(p, "/trace/"):
		id := strings.TrimPrefix(p, "/trace/")
		if _, err := ParseTraceID(id); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		h.page(w, "spanprof · trace "+id, strings.ToLower(id))
	default:
		h.next.ServeHTTP(w, r)
	}
}

func (h *Handler) apiTrace(w http.ResponseWriter, r *http.Request, rest string) {
	idHex, sub, _ := strings.Cut(rest, "/")
	id, err := ParseTraceID(idHex)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	switch sub {
	case "":
		tv, ok, err := h.store.TraceView(id)
		if err != nil {
			h.unavailable(w, err)
			return
		}
		if !ok {
			http.Error(w, fmt.Sprintf("trace %s: not in the window (no span and no sample of it)", idHex), http.StatusNotFound)
			return
		}
		h.json(w, tv)
	case "flame":
		q := r.URL.Query()
		sid, err := hex.DecodeString(q.Get("span_id"))
		if err != nil || len(sid) != 8 {
			http.Error(w, fmt.Sprintf("parse span_id %q: want 16 hex digits", q.Get("span_id")), http.StatusBadRequest)
			return
		}
		kind := profile.OnCPU
		switch q.Get("kind") {
		case "", "on":
		case "off":
			kind = profile.OffCPU
		default:
			http.Error(w, fmt.Sprintf("parse kind %q: want on or off", q.Get("kind")), http.StatusBadRequest)
			return
		}
		f, err := h.store.Flame(id, [8]byte(sid), kind)
		if err != nil {
			h.unavailable(w, err)
			return
		}
		h.json(w, f)
	default:
		http.NotFound(w, r)
	}
}

// unavailable answers 503 when the store could not be read: the page
// shows the message and keeps polling.
func (h *Handler) unavailable(w http.ResponseWriter, err error) {
	h.log.Warn("read store", "err", err)
	http.Error(w, "store unavailable: "+err.Error(), http.StatusServiceUnavailable)
}

func (h *Handler) json(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		h.log.Error("encode api response", "err", err)
		http.Error(w, "encode response: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(b)
}

// page writes the trace page shell; its script reads the trace (or the
// list when traceID is empty) from the API and polls for changes.
func (h *Handler) page(w http.ResponseWriter, title, traceID string) {
	css, err := assets.ReadFile("assets/trace.css")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	js, err := assets.ReadFile("assets/trace.js")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	var b bytes.Buffer
	policy := flamegraph.LiveContentSecurityPolicy
	fmt.Fprintf(&b, "<!DOCTYPE html>\n<html lang=\"en\" data-trace-id=\"%s\">\n<head>\n<meta charset=\"utf-8\">\n", html.EscapeString(traceID))
	fmt.Fprintf(&b, "<meta http-equiv=\"Content-Security-Policy\" content=\"%s\">\n", policy)
	fmt.Fprintf(&b, "<title>%s</title>\n<style>\n%s</style>\n</head>\n<body>\n", html.EscapeString(title), css)
	fmt.Fprintf(&b, traceBody, html.EscapeString(title))
	b.WriteString("<script>\n")
	b.Write(js)
	b.WriteString("</script>\n</body>\n</html>\n")
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", policy)
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(b.Bytes())
}

const traceBody = `<header><h1>%s</h1> <a href="/">flame graph of the window</a> · <a href="/trace/">traces</a>
<label><input type="checkbox" id="follow" checked> follow</label></header>
<p id="window" class="status"></p>
<p id="status" class="status"></p>
<section id="list-panel" hidden><h2>Traces <small id="list-info"></small></h2>
<table id="traces"><thead><tr><th>trace_id</th><th>root span</th><th>service</th><th>start</th><th>wall</th><th>spans</th><th>sampled spans</th><th>on-CPU</th><th>off-CPU</th></tr></thead><tbody></tbody></table></section>
<section id="trace-panel" hidden><h2>Spans <small id="trace-info"></small></h2>
<div id="gantt"></div>
<table id="spans"><thead><tr><th>span</th><th>service</th><th>span_id</th><th>start</th><th>wall</th><th>on-CPU</th><th>off-CPU</th><th>off-CPU by reason</th><th>samples</th><th>flame graph</th></tr></thead><tbody></tbody></table>
</section>
<section id="flame-panel" hidden><h2>Flame graph <small id="flame-info"></small></h2>
<span class="kind"><label><input type="radio" name="kind" value="on" checked> on-CPU</label> <label><input type="radio" name="kind" value="off"> off-CPU</label></span>
<div id="flame"></div></section>
<footer id="perf"></footer>
`
