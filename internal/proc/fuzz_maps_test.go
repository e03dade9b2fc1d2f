package proc

import (
	"strings"
	"testing"
)

// FuzzParseMaps: /proc/PID/maps text of any shape never panics, and what
// it accepts is well formed.
func FuzzParseMaps(f *testing.F) {
	f.Add("55d0c0a02000-55d0c0a05000 r-xp 00002000 fe:01 1234   /usr/bin/demo\n7ffc00000000-7ffc00002000 r-xp 00000000 00:00 0 [vdso]\n")
	f.Add("7f0000100000-7f0000200000 r-xp 00028000 fe:01 99 /usr/lib/my lib.so (deleted)\n")
	f.Add("1-2 x 3 4 5\n")
	f.Add("1-2 r-x 3 4 5  \n")
	f.Fuzz(func(t *testing.T, text string) {
		ms, err := ParseMaps(strings.NewReader(text))
		if err != nil {
			return
		}
		for _, m := range ms {
			p := &Process{Mappings: ms}
			_ = p.Find(m.Start)
			if strings.ContainsRune(m.Path, '\n') {
				t.Fatalf("path %q spans lines", m.Path)
			}
		}
	})
}

func FuzzParseCgroup(f *testing.F) {
	f.Add("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1a2b3c4d_1111_2222_3333_444455556666.slice/cri-containerd-abcdefabcdefabcdefabcdefabcdefabcdefabcdefabcdefabcdefabcdefabcd.scope\n")
	f.Add("::\n:::\n")
	f.Fuzz(func(t *testing.T, text string) {
		cid, pod := ParseCgroup(text)
		if cid != "" && len(cid) != 64 {
			t.Fatalf("container id %q", cid)
		}
		if pod != "" && len(pod) != 36 {
			t.Fatalf("pod uid %q", pod)
		}
	})
}
