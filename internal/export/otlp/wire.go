package otlp

import (
	"fmt"

	"go.opentelemetry.io/collector/pdata/pprofile"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	profilespb "go.opentelemetry.io/proto/otlp/profiles/v1development"
	"google.golang.org/protobuf/proto"
)

// EncodeProto encodes pd as an OTLP ExportProfilesServiceRequest (the
// same wire form as ProfilesData) with resource and scope attributes
// written inline (key, string_value) rather than as references into the
// dictionary's string table.
//
// pdata's marshaller moves those strings into the string table
// (key_strindex, string_value_strindex), which the protocol allows, but
// conformance checkers that look for orphaned strings (the profiling
// SIG's profcheck) count only references from the dictionary and the
// profiles, so each string used by a resource alone reads as an orphan.
// Inline attributes are valid for every reader and leave the string
// table holding exactly what Build put there, every entry referenced.
//
// pd must have been made by Build, and is mutated (build afresh for
// every encode).
func EncodeProto(pd pprofile.Profiles) ([]byte, error) {
	built := pd.Dictionary().StringTable().Len()
	var m pprofile.ProtoMarshaler
	buf, err := m.MarshalProfiles(pd)
	if err != nil {
		return nil, fmt.Errorf("marshal otlp profiles: %w", err)
	}
	var data profilespb.ProfilesData
	if err := proto.Unmarshal(buf, &data); err != nil {
		return nil, fmt.Errorf("decode otlp profiles: %w", err)
	}
	strs := data.GetDictionary().GetStringTable()
	for _, rp := range data.ResourceProfiles {
		if err := inline(rp.GetResource().GetAttributes(), strs); err != nil {
			return nil, fmt.Errorf("inline resource attributes: %w", err)
		}
		for _, sp := range rp.ScopeProfiles {
			if err := inline(sp.GetScope().GetAttributes(), strs); err != nil {
				return nil, fmt.Errorf("inline scope attributes: %w", err)
			}
		}
	}
	// The marshaller appended the strings it interned after Build's;
	// none is referenced any more.
	if data.Dictionary != nil && len(strs) > built {
		data.Dictionary.StringTable = strs[:built]
	}
	out, err := proto.Marshal(&data)
	if err != nil {
		return nil, fmt.Errorf("marshal otlp profiles: %w", err)
	}
	return out, nil
}

// inline resolves key_strindex and string_value_strindex in kvs.
func inline(kvs []*commonpb.KeyValue, strs []string) error {
	for _, kv := range kvs {
		if i := kv.GetKeyStrindex(); i != 0 {
			if int(i) >= len(strs) || i < 0 {
				return fmt.Errorf("key_strindex %d out of range [0, %d)", i, len(strs))
			}
			kv.Key, kv.KeyStrindex = strs[i], 0
		}
		if err := inlineValue(kv.GetValue(), strs); err != nil {
			return err
		}
	}
	return nil
}

func inlineValue(v *commonpb.AnyValue, strs []string) error {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValueStrindex:
		i := x.StringValueStrindex
		if int(i) >= len(strs) || i < 0 {
			return fmt.Errorf("string_value_strindex %d out of range [0, %d)", i, len(strs))
		}
		v.Value = &commonpb.AnyValue_StringValue{StringValue: strs[i]}
	case *commonpb.AnyValue_KvlistValue:
		return inline(x.KvlistValue.GetValues(), strs)
	case *commonpb.AnyValue_ArrayValue:
		for _, e := range x.ArrayValue.GetValues() {
			if err := inlineValue(e, strs); err != nil {
				return err
			}
		}
	}
	return nil
}
