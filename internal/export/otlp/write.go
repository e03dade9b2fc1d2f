package otlp

import (
	"fmt"
	"io"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/spanprof/spanprof/internal/profile"
)

// WriteJSON writes p as an OTLP/JSON ExportProfilesServiceRequest, the
// format of `.otlp.json` files.
func WriteJSON(w io.Writer, p *profile.Profile) error {
	var m pprofile.JSONMarshaler
	return write(w, p, m.MarshalProfiles)
}

// WriteProto writes p as an OTLP protobuf ExportProfilesServiceRequest,
// the format of `.otlp.pb` files.
func WriteProto(w io.Writer, p *profile.Profile) error {
	var m pprofile.ProtoMarshaler
	return write(w, p, m.MarshalProfiles)
}

func write(w io.Writer, p *profile.Profile, marshal func(pprofile.Profiles) ([]byte, error)) error {
	buf, err := marshal(Build(p))
	if err != nil {
		return fmt.Errorf("marshal otlp profiles: %w", err)
	}
	if _, err := w.Write(buf); err != nil {
		return fmt.Errorf("write otlp profiles: %w", err)
	}
	return nil
}
