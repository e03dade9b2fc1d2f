package truth

import "testing"

func TestStateFitsStack(t *testing.T) {
	pipeRead := []string{"__schedule", "schedule", "anon_pipe_read", "vfs_read", "read", "wait_pingpong"}
	pipeLock := []string{"__schedule", "schedule", "schedule_preempt_disabled", "__mutex_lock.constprop.0", "pipe_write", "vfs_write", "write", "wait_pingpong"}
	for _, c := range []struct {
		state  string
		frames []string
		want   bool
	}{
		{"S", pipeRead, true},
		{"D", pipeLock, true},
		{"D", pipeRead, false}, // an interruptible wait cannot be in D
		{"R", pipeLock, false},
		{"", pipeRead, false},
		{"D", nil, false},
	} {
		if got := StateFitsStack(c.state, c.frames); got != c.want {
			t.Errorf("StateFitsStack(%q, %v) = %v, want %v", c.state, c.frames, got, c.want)
		}
	}
}
