package proc

import (
	"path/filepath"
	"testing"
	"time"
)

// TestHoldKeepsReplacedImages: an image replaced by an exec, by a fork
// that took its pid, or forgotten after its exit, stays readable while
// held, with the mappings later copies of it gained, and its files close
// with the last Release; an image nobody holds is released as it leaves
// the table, and cannot be held after.
func TestHoldKeepsReplacedImages(t *testing.T) {
	tmp := t.TempDir()
	a, b, lib := filepath.Join(tmp, "a"), filepath.Join(tmp, "b"), filepath.Join(tmp, "lib.so")
	writeELFStubs(t, a, b, lib)
	root := filepath.Join(tmp, "proc")
	tr := NewTracker(root, nil)
	defer tr.Close()
	path := func(p *Process) string {
		if p == nil || len(p.Mappings) == 0 {
			return "<none>"
		}
		return p.Mappings[0].Path
	}

	t.Run("exec", func(t *testing.T) {
		fakeProc(t, root, 7, a)
		old := tr.Get(7)
		if !tr.Hold(old) || !tr.Hold(old) { // two intervals' samples
			t.Fatal("the entry could not be held")
		}
		// Found later: a library, added to a copy of the same image.
		fakeProc(t, root, 7, a, lib)
		time.Sleep(time.Millisecond)
		tr.Refresh(7, 0)
		fakeProc(t, root, 7, b)
		tr.Exec(7, time.Now(), nil)
		got, current := tr.Image(old.Gen())
		if path(got) != a || current || len(got.Mappings) != 2 {
			t.Fatalf("held image after the exec: %s current %v with %d mappings, want %s with its library, replaced", path(got), current, len(got.Mappings), a)
		}
		if cur, current := tr.Image(tr.Get(7).Gen()); cur != nil || current {
			t.Errorf("an image nobody holds is returned: %s", path(cur))
		}
		files := tr.OpenFiles() // a, lib.so and b
		tr.Release(old.Gen())
		if got, _ := tr.Image(old.Gen()); got == nil || tr.OpenFiles() != files {
			t.Fatalf("released once of twice: image %s, %d files, want it kept with %d", path(got), tr.OpenFiles(), files)
		}
		tr.Release(old.Gen())
		if got, _ := tr.Image(old.Gen()); got != nil || tr.OpenFiles() != files-2 {
			t.Fatalf("released twice: image %s, %d files, want none and %d files", path(got), tr.OpenFiles(), files-2)
		}
		if tr.Hold(old) {
			t.Error("an image released from the table could be held again")
		}
	})

	t.Run("not held", func(t *testing.T) {
		fakeProc(t, root, 8, a)
		tr.Get(8)
		files := tr.OpenFiles()
		fakeProc(t, root, 8, lib)
		tr.Exec(8, time.Now(), nil)
		if got := tr.OpenFiles(); got != files {
			// a is closed with the image, lib.so opened with the new one.
			t.Errorf("%d files after an exec replaced an image nobody held, want %d", got, files)
		}
		if tr.Held() != 0 {
			t.Errorf("%d images held, want none", tr.Held())
		}
	})

	t.Run("exited and forgotten", func(t *testing.T) {
		fakeProc(t, root, 9, b)
		p := tr.Get(9)
		tr.Hold(p)
		tr.Exit(9, time.Now())
		tr.ForgetExited(time.Now())
		got, current := tr.Image(p.Gen())
		if path(got) != b || current {
			t.Fatalf("held image of a forgotten process: %s current %v, want %s", path(got), current, b)
		}
		tr.Release(p.Gen())
		if tr.Held() != 0 {
			t.Errorf("%d images held after the release, want none", tr.Held())
		}
	})
}
