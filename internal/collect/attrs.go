package collect

import (
	"encoding/hex"

	"github.com/spanprof/spanprof/internal/profile"
	"github.com/spanprof/spanprof/internal/sampler"
	"github.com/spanprof/spanprof/internal/tracectx"
)

// attrs names the thread-context attributes r carries with its process's
// key map. unnamed counts those the map names no key for; bad says the
// attributes did not parse (none is kept then).
func (c *Collector) attrs(r *sampler.Record) (a profile.Attrs, unnamed int, bad bool) {
	if r.LocalRootSpanID != ([8]byte{}) {
		return profile.MakeAttrs([]profile.Attr{{Key: TransactionIDKey, Value: hex.EncodeToString(r.LocalRootSpanID[:])}}), 0, false
	}
	if len(r.CtxAttrs) == 0 {
		return "", 0, false
	}
	var keys []string
	if c.opts.ContextKeys != nil {
		keys = c.opts.ContextKeys(r.PID)
	}
	named, unnamed, err := tracectx.ResolveAttrs(r.CtxAttrs, keys)
	if err != nil {
		c.log.Debug("thread context attributes", "pid", r.PID, "tid", r.TID, "error", err)
		return "", 0, true
	}
	kv := make([]profile.Attr, 0, len(named))
	for _, n := range named {
		if reservedKeys[n.Key] {
			unnamed++ // the exporters set it themselves
			continue
		}
		kv = append(kv, profile.Attr{Key: n.Key, Value: n.Value})
	}
	return profile.MakeAttrs(kv), unnamed, false
}

// TransactionIDKey is the sample attribute holding an Elastic APM span's
// local root span id (its transaction's id, as Elastic names it), in
// lowercase hex (docs/thread-context.md).
const TransactionIDKey = "transaction.id"

// reservedKeys are the sample attributes and pprof labels the exporters
// set from the sample itself; a thread-context attribute named alike is
// left out (and counted) rather than contradict them.
var reservedKeys = map[string]bool{
	"thread.id": true, "thread.name": true, "thread.state": true, "off_cpu.reason": true,
	"trace_id": true, "span_id": true, "pid": true, "process": true,
}

// internAttrs returns the attrSets id of a, 0 for none or when the
// interval holds as many distinct sets as allowed already: that sample is
// counted and, the first time in an interval, logged. Called with c.mu
// held.
func (c *Collector) internAttrs(pid uint32, a profile.Attrs) uint32 {
	if a == "" {
		return 0
	}
	if len(c.attrSets.list) == 0 {
		c.attrSets.intern("") // id 0: none
	}
	if id, ok := c.attrSets.ids[string(a)]; ok {
		return id
	}
	limit := c.opts.MaxAttrSets
	if limit <= 0 {
		limit = DefaultMaxAttrSets
	}
	if len(c.attrSets.list)-1 >= limit {
		if !c.attrsCutLogged {
			c.attrsCutLogged = true
			c.log.Warn("thread context attributes dropped: too many distinct sets in this interval (a per-request value in an attribute?); the samples keep their trace ids",
				"limit", limit, "pid", pid)
		}
		c.stats.CtxAttrsCut++
		return 0
	}
	return c.attrSets.intern(string(a))
}
