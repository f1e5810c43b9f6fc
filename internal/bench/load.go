package bench

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// LoadAverage is /proc/loadavg's 1-, 5- and 15-minute load averages; zero
// where the file is missing (not Linux).
type LoadAverage [3]float64

// ReadLoadAverage reads /proc/loadavg.
func ReadLoadAverage() (LoadAverage, error) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return LoadAverage{}, err
	}
	var l LoadAverage
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return l, fmt.Errorf("bench: /proc/loadavg: %q has fewer than three fields", b)
	}
	for i := range l {
		if l[i], err = strconv.ParseFloat(f[i], 64); err != nil {
			return l, fmt.Errorf("bench: /proc/loadavg: %w", err)
		}
	}
	return l, nil
}

func (l LoadAverage) String() string { return fmt.Sprintf("%.2f %.2f %.2f", l[0], l[1], l[2]) }

// LoadName is the name of the result that carries the load average.
const LoadName = "load_average"

// LoadResult is the result row that reports the machine's load average at
// the start and at the end of a run, so that every table says how busy the
// machine was when it was measured. Where /proc/loadavg cannot be read it
// says so in Skipped.
func LoadResult(dialect string, start, end LoadAverage, errStart, errEnd error) Result {
	r := Result{Name: LoadName, Dialect: dialect,
		Note: "/proc/loadavg (1, 5, 15 min) at the start and at the end of this run; the machine is shared"}
	if err := errors.Join(errStart, errEnd); err != nil {
		r.Skipped = err.Error()
		return r
	}
	r.Metrics = map[string]float64{
		"start_1m": start[0], "start_5m": start[1], "start_15m": start[2],
		"end_1m": end[0], "end_5m": end[1], "end_15m": end[2],
	}
	return r
}
