package folded

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spanprof/spanprof/internal/export/exporttest"
	"github.com/spanprof/spanprof/internal/profile"
)

func TestWrite(t *testing.T) {
	onOnly := exporttest.Small()
	onOnly.Samples = onOnly.Samples[:7]
	tests := []struct {
		name string
		p    *profile.Profile
		want string
	}{
		{"on-CPU counts", onOnly, `server;main.main;libnoid.so+0x1234 1
server;main.main;main.handle;do_syscall_64 4
worker;main.main;0x1234 1
worker;main.main;main.outer;main.helper 1
`},
		{"with off-CPU all in nanoseconds", exporttest.Small(), `server;[off-cpu];main.main;main.handle;pthread_cond_wait;schedule 10000000
server;main.main;libnoid.so+0x1234 10000000
server;main.main;main.handle;do_syscall_64 40000000
worker;main.main;0x1234 10000000
worker;main.main;main.outer;main.helper 10000000
`},
		{"empty", &profile.Profile{}, ""},
		{"unknown process and separators", &profile.Profile{Samples: []profile.Sample{
			{PID: 7, Value: 3, Frames: []profile.Frame{{Function: "a;b"}}},
		}}, "pid 7;a:b 3\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := Write(&buf, tt.p); err != nil {
				t.Fatal(err)
			}
			if got := buf.String(); got != tt.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, tt.want)
			}
			for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
				if l != "" && strings.Count(l, " ") < 1 {
					t.Errorf("line without count: %q", l)
				}
			}
		})
	}
}
