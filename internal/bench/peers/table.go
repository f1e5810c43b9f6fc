package peers

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/fencekit/fence/internal/bench"
)

// WriteJSON prints rows as a JSON list.
func WriteJSON(w io.Writer, rows []Row) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if rows == nil {
		rows = []Row{}
	}
	return enc.Encode(rows)
}

// WriteTable prints the operations, then the contended scenarios, then the
// load average and what each peer is.
func WriteTable(w io.Writer, rows []Row) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DB\tOPERATION\tPEER\tMEDIAN\tROUND TRIPS\tRATIO TO FENCE\tDURABLE")
	for _, r := range rows {
		if r.Name == Contended || r.Name == bench.LoadName {
			continue
		}
		if r.Skipped != "" {
			fmt.Fprintf(tw, "%s\t%s\t%s\tskipped\t\t\t\n", r.Dialect, r.Name, r.Peer)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.2f\t%s\t%v\n", r.Dialect, r.Name, r.Peer, bench.Duration(r.NsPerOp), r.RoundTripsPerOp, ratio(r.RatioToFence), r.Durable)
	}
	fmt.Fprintln(tw, "\nDB\tCONTENDED\tPEER\tLEASES\tACQUISITIONS/S\tTO FENCE\tROUNDS (TO FENCE)\tREFUSAL P50\tREFUSAL P99\tDURABLE")
	for _, r := range rows {
		if r.Name != Contended {
			continue
		}
		if r.Skipped != "" {
			fmt.Fprintf(tw, "%s\t%d workers\t%s\t%d\tskipped\t\t\t\t\t\n", r.Dialect, r.Workers, r.Peer, r.Leases)
			continue
		}
		fmt.Fprintf(tw, "%s\t%d workers\t%s\t%d\t%.0f\t%s\t%s\t%s\t%s\t%v\n", r.Dialect, r.Workers, r.Peer, r.Leases, r.AcquisitionsPerS, ratio(r.ThroughputToFence), roundRatios(r.ThroughputToFenceRuns), bench.Duration(r.RefusalP50Ns), bench.Duration(r.RefusalP99Ns), r.Durable)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, r := range rows {
		key := r.Peer + "\x00" + r.Note + "\x00" + r.Skipped
		switch {
		case r.Skipped != "" && r.Name != bench.LoadName && !seen[key]:
			seen[key] = true
			fmt.Fprintf(w, "%s %s skipped: %s\n", r.Peer, r.Name, r.Skipped)
		case r.Name == bench.LoadName && r.Skipped == "":
			fmt.Fprintf(w, "%s load average: %.2f %.2f %.2f at the start, %.2f %.2f %.2f at the end\n", r.Dialect,
				r.Metrics["start_1m"], r.Metrics["start_5m"], r.Metrics["start_15m"], r.Metrics["end_1m"], r.Metrics["end_5m"], r.Metrics["end_15m"])
		case r.Note != "" && !seen[r.Peer]:
			seen[r.Peer] = true
			fmt.Fprintf(w, "%s: %s\n", r.Peer, r.Note)
		}
	}
	return nil
}

// roundRatios lists every round's ratio, "1.10 0.98 1.22", so that a
// reader sees the spread behind the median.
func roundRatios(xs []float64) string {
	var b strings.Builder
	for i, x := range xs {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%.2f", x)
	}
	return b.String()
}

func ratio(x float64) string {
	if x <= 0 {
		return ""
	}
	return fmt.Sprintf("%.2fx", x)
}
