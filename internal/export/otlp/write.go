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
	return write(w, p, func(pd pprofile.Profiles) ([]byte, error) {
		buf, err := m.MarshalProfiles(pd)
		if err != nil {
			return nil, fmt.Errorf("marshal otlp profiles: %w", err)
		}
		return buf, nil
	})
}

// WriteProto writes p as an OTLP protobuf ExportProfilesServiceRequest,
// the format of `.otlp.pb` files.
func WriteProto(w io.Writer, p *profile.Profile) error {
	return write(w, p, EncodeProto)
}

func write(w io.Writer, p *profile.Profile, marshal func(pprofile.Profiles) ([]byte, error)) error {
	buf, err := marshal(Build(p))
	if err != nil {
		return err
	}
	if _, err := w.Write(buf); err != nil {
		return fmt.Errorf("write otlp profiles: %w", err)
	}
	return nil
}
