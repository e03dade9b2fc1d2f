package reliability

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/testutil"
)

// TestReliabilityProcessChurn runs `record --all` while 1,000 short-lived
// processes a second are spawned (20 s, a minute with
// SPANPROF_RELIABILITY_LONG). spanprof must keep up (no crash, losses
// counted), keep its memory and open files bounded, and symbolize the
// samples of children that exited long before the profile was built.
func TestReliabilityProcessChurn(t *testing.T) {
	testutil.RequireRoot(t)
	secs := 20
	if long() {
		secs = 60
	}
	out := filepath.Join(t.TempDir(), "churn.pb.gz")
	rec := startSpanprof(t, "recording", "record", "--all", "--frequency", "999",
		"--duration", fmt.Sprintf("%ds", secs+3), "--output", out)
	pid := rec.cmd.Process.Pid

	churn := exec.Command(filepath.Join(fixtures, "churn"), filepath.Join(fixtures, "churn-child"),
		"1000", fmt.Sprint(secs), "300")
	stdout, _ := churn.StdoutPipe()
	if err := churn.Start(); err != nil {
		t.Fatal(err)
	}
	// Watch spanprof's RSS and open files while the churn runs.
	var maxFDs int
	var rssSeries []int64
	tick := time.NewTicker(time.Second)
	churnDone := make(chan string, 1)
	go func() {
		var last string
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			last = sc.Text()
		}
		churn.Wait()
		churnDone <- last
	}()
	var summary string
watch:
	for {
		select {
		case summary = <-churnDone:
			break watch
		case <-tick.C:
			maxFDs = max(maxFDs, openFDs(pid))
			if rss, err := procStatus(pid, "VmRSS"); err == nil {
				rssSeries = append(rssSeries, rss)
			}
		}
	}
	tick.Stop()
	hwm := rec.wait(t)
	t.Logf("churn: %s", summary)
	t.Logf("spanprof: peak RSS %d MiB, RSS by second (MiB) %v, open files max %d", hwm/1024, mib(rssSeries), maxFDs)
	t.Logf("spanprof stderr:\n%s", rec.stderr)

	p := readPprof(t, out)
	// Of the children's samples: those with every user frame symbolized
	// (kernel frames always are), and those in the child's own code.
	var total, childSamples, childUser, childAllNamed int64
	unnamed := map[string]int64{}
	// Per object the children map: samples with a frame there, and those
	// with every frame there named. The executable is placed from the
	// exec; libc and the vDSO only from the mappings captured at exit
	// when the child is gone before /proc could be read.
	inFile, fileNamed := map[string]int64{}, map[string]int64{}
	// Samples inside execve (a kernel stack through the ELF loader or
	// bprm_execve): before the new image's registers are set, their user
	// frame is the parent's libc execve (posix_spawn's child runs in the
	// parent's address space), named against the parent's image.
	var inExec, inExecNamed, inExecLibc int64
	// Samples in the child's main, and those of them whose stack reaches
	// the process's entry (_start) through glibc's frameless
	// __libc_start_call_main: unwound by its rules in libc, which a
	// child gone before /proc could be read has only from its exit.
	var inMain, mainToEntry int64
	for _, s := range p.Sample {
		v := s.Value[0]
		total += v
		if label(s, "thread.name") != "churn-child" {
			continue
		}
		childSamples += v
		user, allNamed, exec := false, true, false
		hasMain, root := false, ""
		named := map[string]bool{} // file -> every frame there named
		for _, loc := range s.Location {
			ok := false
			for _, ln := range loc.Line {
				if ln.Function != nil && ln.Function.Name != "" {
					ok = true
				}
			}
			if loc.Address >= 1<<63 { // kernel
				for _, ln := range loc.Line {
					if ln.Function != nil && (ln.Function.Name == "load_elf_binary" || ln.Function.Name == "bprm_execve") {
						exec = true
					}
				}
				continue
			}
			file := "(no mapping)"
			if loc.Mapping != nil {
				file, _, _ = strings.Cut(filepath.Base(loc.Mapping.File), ":")
			}
			if !user && exec { // the user leaf of a sample inside execve
				inExec += v
				if ok {
					inExecNamed += v
				}
				if file == "libc.so.6" {
					inExecLibc += v
				}
			}
			user = true
			for _, ln := range loc.Line {
				if ln.Function != nil {
					hasMain = hasMain || ln.Function.Name == "main"
					root = ln.Function.Name // the last: outermost
				}
			}
			if prev, seen := named[file]; !seen || prev {
				named[file] = ok
			}
			if !ok {
				allNamed = false
				unnamed[file] += v
			}
		}
		if hasMain {
			inMain += v
			if root == "_start" {
				mainToEntry += v
			}
		}
		if user {
			childUser += v
			if allNamed {
				childAllNamed += v
			}
		}
		for file, ok := range named {
			inFile[file] += v
			if ok {
				fileNamed[file] += v
			}
		}
	}
	childInExe, childExeNamed := inFile["churn-child"], fileNamed["churn-child"]
	t.Logf("samples %d, of short-lived children %d, %d with user frames, %d (%.1f%%) with every user frame symbolized; "+
		"%d in the child's executable, %d (%.1f%%) of them with its frames named; lost %v",
		total, childSamples, childUser, childAllNamed, pct(childAllNamed, childUser),
		childInExe, childExeNamed, pct(childExeNamed, childInExe), lostComments(p))
	t.Logf("unsymbolized user frames of the children, by file: %v", unnamed)
	for _, file := range []string{"libc.so.6", "ld-linux-x86-64.so.2", "[vdso]"} {
		t.Logf("%d samples in %s, %d (%.1f%%) of them with its frames named", inFile[file], file, fileNamed[file], pct(fileNamed[file], inFile[file]))
	}
	t.Logf("%d samples inside execve, %d (%.1f%%) with their user frame named, %d in libc", inExec, inExecNamed, pct(inExecNamed, inExec), inExecLibc)
	t.Logf("%d samples in the children's main, %d (%.1f%%) of them with their stack to _start", inMain, mainToEntry, pct(mainToEntry, inMain))
	if childSamples == 0 {
		t.Fatal("no samples of the short-lived children")
	}
	if !strings.Contains(rec.stderr.String(), "taken while a process was starting a new program (exec)") {
		t.Error("no sample flagged inside an exec: the children's samples in execve keep their parent's addresses unnamed")
	}
	if inExec >= 50 && pct(inExecNamed, inExec) < 90 {
		t.Errorf("only %.1f%% of the children's samples inside execve have their user frame named (want >= 90%%)", pct(inExecNamed, inExec))
	}
	// The executable is placed from the exec event when the child is gone
	// before /proc/PID/maps could be read. Without that, its frames have
	// no mapping at all (counted above as [unknown]).
	if !strings.Contains(rec.stderr.String(), "were placed from the exec") {
		t.Error("no process placed from its exec image: the children gone before /proc could be read keep addresses only")
	}
	if got := pct(childExeNamed, childInExe); got < 90 {
		t.Errorf("only %.1f%% of the children's samples in their executable have its frames named (want >= 90%%)", got)
	}
	// Memory: 20,000-60,000 processes must not cost more than a bounded
	// amount; the mappings of a process are a few hundred bytes.
	if hwm > 512*1024 {
		t.Errorf("peak RSS %d MiB under churn, want < 512 MiB", hwm/1024)
	}
	if maxFDs > 4096 {
		t.Errorf("%d open files under churn: files of exited processes are kept per process, not per file", maxFDs)
	}
	// The libraries the loader maps after the exec (libc) and the vDSO
	// are placed from the mappings the kernel captures at exit (Linux
	// 6.7 on); before, 32 % of the children's samples had every user
	// frame named, 83-84 % with them on the development VM, 92-93 %
	// once stacks end at a return address in no code mapping (frame
	// chains broken in the loader, docs/symbolization.md), and 99.6-99.8
	// % once the samples inside execve are symbolized against the
	// parent's image (docs/reliability.md).
	if strings.Contains(rec.stderr.String(), "not captured at exit") {
		t.Log("KNOWN LIMIT: this kernel cannot capture mappings at exit; libc and vDSO frames of children gone before /proc could be read stay unnamed")
	} else {
		for _, file := range []string{"libc.so.6", "[vdso]"} {
			if inFile[file] < 50 {
				continue // too few to judge
			}
			if got := pct(fileNamed[file], inFile[file]); got < 90 {
				t.Errorf("only %.1f%% of the children's samples in %s have its frames named (want >= 90%%)", got, file)
			}
		}
		// Before the samples of a child gone before /proc could be read
		// waited for its exit's capture, 8-18 % of them reached _start.
		if got := pct(mainToEntry, inMain); inMain >= 100 && got < 99 {
			t.Errorf("only %.1f%% of the %d children's samples in main have their stack to _start (want >= 99%%): unwound before the libraries captured at their exit were known", got, inMain)
		}
		if got := pct(childAllNamed, childUser); got < 95 {
			t.Errorf("only %.1f%% of the short-lived children's samples have every user frame symbolized (want >= 95%%)", got)
		}
	}
	// What stays unnamed (0.2-0.4 % on the development VM under load
	// average 6-12) is scattered: a few addresses each in the
	// executable, libc and the loader. The 95 % bar leaves a loaded
	// machine its margin; SPANPROF_RELIABILITY_STRICT asks for 99 %.
	if got := pct(childAllNamed, childUser); got < 99 {
		msg := fmt.Sprintf("only %.1f%% of the short-lived children's samples have every user frame symbolized (want >= 99%%)", got)
		if os.Getenv("SPANPROF_RELIABILITY_STRICT") != "" {
			t.Error(msg)
		} else {
			t.Log("BELOW STRICT BAR: " + msg)
		}
	}
}

func pct(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

func mib(kib []int64) []int64 {
	out := make([]int64, len(kib))
	for i, v := range kib {
		out[i] = v / 1024
	}
	return out
}
