// Package cli holds what every spanprof subcommand parses the same way:
// flag errors that fit on two lines, durations that name a missing unit,
// "did you mean" suggestions and the build's version.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// Parse parses args into fs. The flag package would print the error and
// every flag's usage on each failure, and the caller prints the error
// again; here a bad flag becomes one error that ends with a hint to the
// command's -h (and the closest flag name for a typo), and -h prints the
// usage to stdout and returns flag.ErrHelp.
func Parse(fs *flag.FlagSet, args []string, stdout io.Writer) error {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	if err == nil {
		return nil
	}
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(stdout)
		fs.Usage()
		return err
	}
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		var names []string
		fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
		if s := Suggest(strings.TrimLeft(name, "-"), names); s != "" {
			msg += fmt.Sprintf(" (did you mean --%s?)", s)
		}
	}
	return &FlagError{Msg: msg, Command: fs.Name()}
}

// FlagError is a bad command line. Its text is the problem, a newline and
// the hint naming the command's help.
type FlagError struct {
	Msg     string
	Command string // "spanprof record"
}

func (e *FlagError) Error() string {
	return fmt.Sprintf("%s\nRun '%s -h' for its flags.", e.Msg, e.Command)
}

// durationValue is a flag.Value parsing time.ParseDuration's syntax; a bare
// number is refused with the unit it probably lacks.
type durationValue time.Duration

func (d *durationValue) String() string { return time.Duration(*d).String() }

func (d *durationValue) Set(s string) error {
	v, err := ParseDuration(s)
	if err != nil {
		return err
	}
	*d = durationValue(v)
	return nil
}

// DurationVar defines a duration flag like flag.DurationVar, whose error
// for "2" is "missing unit (2s?)".
func DurationVar(fs *flag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var((*durationValue)(p), name, usage)
}

// Duration defines a duration flag and returns where its value is kept.
func Duration(fs *flag.FlagSet, name string, value time.Duration, usage string) *time.Duration {
	p := new(time.Duration)
	DurationVar(fs, p, name, value, usage)
	return p
}

// ParseDuration is time.ParseDuration with errors a user can act on.
func ParseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err == nil {
		return d, nil
	}
	if _, ferr := strconv.ParseFloat(s, 64); ferr == nil {
		return 0, fmt.Errorf("missing unit (%ss?)", s)
	}
	return 0, fmt.Errorf("not a duration (use a unit: 500ms, 10s, 2m)")
}

// Suggest returns the candidate closest to word by edit distance, or ""
// when none is close enough to be the word mistyped.
func Suggest(word string, candidates []string) string {
	best, bestD := "", 0
	for _, c := range candidates {
		d := distance(word, c)
		if best == "" || d < bestD {
			best, bestD = c, d
		}
	}
	// A third of the word's letters wrong is still a typo ("recrod",
	// "durtion"); more is another word.
	if best == "" || bestD > max(1, len(word)/3) {
		return ""
	}
	return best
}

// distance is the optimal string alignment distance: insertions,
// deletions, substitutions and transpositions of adjacent letters (the
// commonest typo) each cost one.
func distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}
