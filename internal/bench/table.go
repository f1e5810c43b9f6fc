package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
)

// WriteTable prints results as an aligned table: one line per case, then
// what the alternatives give up and the scale experiments' numbers.
func WriteTable(w io.Writer, rs []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DB\tCASE\tMEDIAN\tROUND TRIPS\tBASELINE\tRATIO\tTARGET\tMET")
	for _, r := range rs {
		if r.Skipped != "" {
			fmt.Fprintf(tw, "%s\t%s\tskipped: %s\t\t\t\t\t\n", r.Dialect, r.Name, r.Skipped)
			continue
		}
		ratio := ""
		if r.RatioToBaseline > 0 {
			ratio = fmt.Sprintf("%.2fx", r.RatioToBaseline)
		}
		met := ""
		if r.Met != nil {
			met = "missed"
			if *r.Met {
				met = "met"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%s\t%s\t%s\t%s\n", r.Dialect, r.Name, Duration(r.NsPerOp), r.RoundTripsPerOp, r.Baseline, ratio, r.Target, met)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range rs {
		switch {
		case r.GivesUp != "":
			fmt.Fprintf(w, "%s %s gives up: %s\n", r.Dialect, r.Name, r.GivesUp)
		case len(r.Metrics) > 0:
			fmt.Fprintf(w, "%s %s: %s\n", r.Dialect, r.Name, metrics(r.Metrics))
		}
	}
	return nil
}

// WriteJSON prints results as a JSON list.
func WriteJSON(w io.Writer, rs []Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if rs == nil {
		rs = []Result{}
	}
	return enc.Encode(rs)
}

// Duration formats nanoseconds for a table.
func Duration(ns float64) string {
	switch {
	case ns >= 1e9:
		return fmt.Sprintf("%.2fs", ns/1e9)
	case ns >= 1e6:
		return fmt.Sprintf("%.2fms", ns/1e6)
	case ns >= 1e3:
		return fmt.Sprintf("%.1fµs", ns/1e3)
	}
	return fmt.Sprintf("%.0fns", ns)
}

func metrics(m map[string]float64) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if b.Len() > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s=%.4g", k, m[k])
	}
	return b.String()
}
