package check

import (
	"debug/elf"
	"testing"
)

func TestElasticExport(t *testing.T) {
	tls := elf.ST_INFO(elf.STB_GLOBAL, elf.STT_TLS)
	for _, tt := range []struct {
		name string
		syms []elf.Symbol
		want bool
	}{
		{"defined TLS", []elf.Symbol{{Name: "elastic_apm_profiling_correlation_tls_v1", Info: tls, Section: 19}}, true},
		{"undefined", []elf.Symbol{{Name: "elastic_apm_profiling_correlation_tls_v1", Info: tls, Section: elf.SHN_UNDEF}}, false},
		{"not TLS", []elf.Symbol{{Name: "elastic_apm_profiling_correlation_tls_v1", Info: elf.ST_INFO(elf.STB_GLOBAL, elf.STT_OBJECT), Section: 19}}, false},
		{"other", []elf.Symbol{{Name: "elastic_apm_profiling_correlation_process_storage_v1", Info: tls, Section: 19}}, false},
	} {
		if got := elasticExport(tt.syms); got != tt.want {
			t.Errorf("%s: elasticExport = %v, want %v", tt.name, got, tt.want)
		}
		info := &elfInfo{ElasticCtx: elasticExport(tt.syms)}
		if info.publishesContext() != tt.want {
			t.Errorf("%s: publishesContext = %v, want %v", tt.name, info.publishesContext(), tt.want)
		}
	}
}
