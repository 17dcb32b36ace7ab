// Package stats summarises benchmark samples (median, min, max) and prints
// them as a table, the one format every bench/ command reports in.
package stats

import (
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
	"time"
)

// Series is a named list of samples in a unit.
type Series struct {
	Name    string
	Unit    string // "ms", "MB/s", …
	Samples []float64
}

// AddDuration records d in milliseconds.
func (s *Series) AddDuration(d time.Duration) {
	s.Samples = append(s.Samples, float64(d.Microseconds())/1000)
}

// Median of the samples (0 when empty).
func (s Series) Median() float64 { return Percentile(s.Samples, 50) }

// Percentile returns the p-th percentile (nearest rank) of xs.
func Percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	c := append([]float64(nil), xs...)
	sort.Float64s(c)
	if p >= 100 {
		return c[len(c)-1]
	}
	rank := int(p/100*float64(len(c))+0.5) - 1
	if p == 50 && len(c)%2 == 0 {
		return (c[len(c)/2-1] + c[len(c)/2]) / 2
	}
	if rank < 0 {
		rank = 0
	}
	if rank >= len(c) {
		rank = len(c) - 1
	}
	return c[rank]
}

func minMax(xs []float64) (float64, float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	lo, hi := xs[0], xs[0]
	for _, x := range xs {
		lo, hi = min(lo, x), max(hi, x)
	}
	return lo, hi
}

// Print writes a table: name, runs, median, p99, min, max, unit.
func Print(w io.Writer, series ...Series) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "measure\truns\tmedian\tp99\tmin\tmax\tunit\t")
	for _, s := range series {
		lo, hi := minMax(s.Samples)
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%s\t\n", s.Name, len(s.Samples), s.Median(), Percentile(s.Samples, 99), lo, hi, s.Unit)
	}
	tw.Flush()
}
