// Package conform checks OTLP profiles (v1development) against the
// conformance rules of the OpenTelemetry profiling SIG's checker
// (profcheck) and the protocol's own requirements, so that every output
// spanprof makes can be tested for them: sample shapes, timestamps inside
// the profile's time range, a dictionary whose tables start with their
// zero entry and hold no duplicate and no unreferenced entry, and valid
// references everywhere.
//
// It reads the wire form (the protobuf types of the proto repository, not
// pdata) so that what it checks is exactly what a backend receives,
// string-table references included.
package conform

import (
	"fmt"
	"strings"

	"go.opentelemetry.io/collector/pdata/pprofile"
	profilespb "go.opentelemetry.io/proto/otlp/profiles/v1development"
	"google.golang.org/protobuf/proto"
)

// Rule names a family of checks; a Violation says which one it broke.
type Rule string

// The rules. Each Violation carries one of them.
const (
	RuleStructure  Rule = "structure"  // resource, scope and profile lists are not empty
	RuleIndex      Rule = "index"      // every table index is in range
	RuleZeroEntry  Rule = "zero-entry" // index 0 of every table is its zero value
	RuleShape      Rule = "shape"      // values and timestamps agree, one shape per profile
	RuleTimeRange  Rule = "time-range" // timestamps in [time_unix_nano, +duration_nano)
	RuleAttrKeys   Rule = "attr-keys"  // no key twice in one attribute list
	RuleValue      Rule = "value"      // non-negative lines, mapping ranges, id lengths
	RuleDuplicate  Rule = "duplicate"  // no dictionary entry twice
	RuleOrphan     Rule = "orphan"     // every dictionary entry referenced
	RuleNotDecoded Rule = "decode"     // the input is not an OTLP profiles message
)

// Violation is one broken rule at one place in the message.
type Violation struct {
	Rule Rule
	// Path locates it, e.g. "resource_profiles[2].scope_profiles[0].profiles[1].samples[7]".
	Path string
	Msg  string
}

func (v Violation) String() string { return fmt.Sprintf("%s: %s: %s", v.Rule, v.Path, v.Msg) }

// Report is what a check found; a nil *Report means none.
type Report struct {
	Violations []Violation
}

// maxListed bounds Error's text; Violations keeps them all.
const maxListed = 20

func (r *Report) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d conformance violations", len(r.Violations))
	for i, v := range r.Violations {
		if i == maxListed {
			fmt.Fprintf(&b, "\n  ... and %d more", len(r.Violations)-maxListed)
			break
		}
		b.WriteString("\n  ")
		b.WriteString(v.String())
	}
	return b.String()
}

// Rules counts the violations of each rule.
func (r *Report) Rules() map[Rule]int {
	out := map[Rule]int{}
	if r != nil {
		for _, v := range r.Violations {
			out[v.Rule]++
		}
	}
	return out
}

// Checker runs every rule. Its zero value checks as the protocol defines
// references.
type Checker struct {
	// Profcheck makes the orphan rule count only the references profcheck
	// counts (from the dictionary's tables and the profiles), not a
	// resource's or scope's key_strindex and string_value_strindex, which
	// the protocol defines as string-table references too but profcheck
	// does not read. A message clean in this mode is clean for profcheck.
	Profcheck bool
}

// Check checks data and returns nil or a *Report.
func (c Checker) Check(data *profilespb.ProfilesData) error {
	k := &check{c: c, d: data.GetDictionary()}
	if k.d == nil {
		k.d = &profilespb.ProfilesDictionary{}
	}
	k.profiles(data)
	k.dictionary()
	k.duplicates()
	k.orphans(data)
	if len(k.out) == 0 {
		return nil
	}
	return &Report{Violations: k.out}
}

// CheckProto checks an OTLP protobuf ExportProfilesServiceRequest or
// ProfilesData (they share one wire form): a `.otlp.pb` file or the body
// of an export request.
func (c Checker) CheckProto(buf []byte) error {
	var data profilespb.ProfilesData
	if err := proto.Unmarshal(buf, &data); err != nil {
		return &Report{Violations: []Violation{{RuleNotDecoded, "", err.Error()}}}
	}
	return c.Check(&data)
}

// CheckJSON checks an OTLP/JSON ExportProfilesServiceRequest (a
// `.otlp.json` file). OTLP/JSON is not protobuf's canonical JSON (ids are
// hex), so it is decoded with pdata and checked in its protobuf form:
// pdata keeps the dictionary's tables as they were, duplicates and
// orphans included.
func (c Checker) CheckJSON(buf []byte) error {
	var u pprofile.JSONUnmarshaler
	pd, err := u.UnmarshalProfiles(buf)
	if err != nil {
		return &Report{Violations: []Violation{{RuleNotDecoded, "", err.Error()}}}
	}
	var m pprofile.ProtoMarshaler
	pb, err := m.MarshalProfiles(pd)
	if err != nil {
		return &Report{Violations: []Violation{{RuleNotDecoded, "", err.Error()}}}
	}
	return c.CheckProto(pb)
}

// check is one run: the dictionary and what it found.
type check struct {
	c   Checker
	d   *profilespb.ProfilesDictionary
	out []Violation
}

func (k *check) add(r Rule, path, format string, args ...any) {
	k.out = append(k.out, Violation{Rule: r, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// index reports whether i is a valid index into a table of n entries,
// and records a violation when it is not.
func (k *check) index(path string, i int32, n int, table string) bool {
	if i < 0 || int(i) >= n {
		k.add(RuleIndex, path, "index %d outside %s [0, %d)", i, table, n)
		return false
	}
	return true
}

func (k *check) str(path string, i int32) bool {
	return k.index(path, i, len(k.d.StringTable), "string_table")
}

// attrs checks an attribute_indices list: valid indices, each key once.
func (k *check) attrs(path string, idx []int32) {
	seen := map[string]int{}
	for j, i := range idx {
		p := fmt.Sprintf("%s.attribute_indices[%d]", path, j)
		if !k.index(p, i, len(k.d.AttributeTable), "attribute_table") {
			continue
		}
		ki := k.d.AttributeTable[i].KeyStrindex
		if !k.str(p+".key_strindex", ki) {
			continue
		}
		key := k.d.StringTable[ki]
		if prev, dup := seen[key]; dup {
			k.add(RuleAttrKeys, p, "key %q already at attribute_indices[%d]", key, prev)
			continue
		}
		seen[key] = j
	}
}
