package torture

import (
	"encoding/json"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// TestRecheck re-runs porcupine on a window dumped under --out:
//
//	FENCE_TORTURE_RECHECK=out/violation-w3-torture-0.json go test -run Recheck -v ./internal/torture
//
// It checks in the dump's acquire mode (strict unless the run was lenient);
// FENCE_TORTURE_LENIENT_ACQUIRE=1 or =0 overrides it.
func TestRecheck(t *testing.T) {
	path := os.Getenv("FENCE_TORTURE_RECHECK")
	if path == "" {
		t.Skip("set FENCE_TORTURE_RECHECK to a dumped window's JSON")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Strict *bool `json:"strict_acquire"`
		Init   state `json:"init"`
		Start  int64 `json:"window_start_ns"`
		End    int64 `json:"window_end_ns"`
		Ops    []op  `json:"ops"`
		Res    *struct {
			Writes   []int64 `json:"committed_writes"`
			Releases []int64 `json:"released_fences"`
			Acq      int     `json:"orphan_acquisitions"`
			Rev      int     `json:"orphan_revokes"`
		} `json:"resolution"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	kinds := map[string]opKind{}
	for k, v := range kindNames {
		kinds[v] = k
	}
	results := map[string]outcome{}
	for k, v := range outcomeNames {
		results[v] = k
	}
	for i := range d.Ops {
		d.Ops[i].Kind, d.Ops[i].Res = kinds[d.Ops[i].KindS], results[d.Ops[i].ResS]
	}
	w := &window{start: d.Start, end: d.End, init: []state{d.Init}, ops: [][]op{d.Ops}}
	if d.Res != nil && os.Getenv("FENCE_TORTURE_UNRESOLVED") == "" {
		r := resolution{writes: map[int64]bool{}, releases: map[int64]bool{}, orphanAcq: d.Res.Acq, orphanRev: d.Res.Rev}
		for _, id := range d.Res.Writes {
			r.writes[id] = true
		}
		for _, f := range d.Res.Releases {
			r.releases[f] = true
		}
		if os.Getenv("FENCE_TORTURE_KEEPACQ") != "" {
			r.orphanAcq = 99 // keep ambiguous acquires, to bisect a resolution
		}
		w.res = []resolution{r}
	}
	if v := os.Getenv("FENCE_TORTURE_VARIANT"); v != "" {
		// Try resolutions by hand: "dropacq" drops every ambiguous acquire,
		// "keepacq" keeps them; both take every ambiguous write and release
		// as committed.
		r := resolution{writes: map[int64]bool{}, releases: map[int64]bool{}, orphanAcq: 99, orphanRev: 99}
		if v == "dropacq" || v == "dropacq-norelease" {
			r.orphanAcq = 0
		}
		for _, o := range d.Ops {
			if o.Res == resAmbiguous {
				r.writes[o.ID] = true
				if v != "dropacq-norelease" {
					r.releases[o.Fence] = true
				}
			}
		}
		w.res = []resolution{r}
	}
	lenient := d.Strict != nil && !*d.Strict
	switch os.Getenv("FENCE_TORTURE_LENIENT_ACQUIRE") {
	case "1":
		lenient = true
	case "0":
		lenient = false
	}
	hs := history(w, 0, lenient)
	t.Logf("acquire failures: lenient %v", lenient)
	timeout := 10 * time.Minute
	res, info := porcupine.CheckOperationsVerbose(newModel(d.Init), hs, timeout)
	t.Logf("%d operations: %v", len(hs), res)
	if res != porcupine.Ok {
		_ = porcupine.VisualizePath(newModel(d.Init), info, path+".recheck.html")
		t.Logf("visualisation: %s.recheck.html", path)
	}
	if res != porcupine.Illegal || os.Getenv("FENCE_TORTURE_SHRINK") == "" {
		return
	}
	calls := make([]int64, 0, len(hs))
	for _, o := range hs {
		calls = append(calls, o.Call)
	}
	slices.Sort(calls)
	lo, hi := 0, len(calls)-1
	for lo < hi {
		mid := (lo + hi) / 2
		r := porcupine.CheckOperationsTimeout(newModel(d.Init), prefix(hs, calls[mid]), timeout)
		t.Logf("prefix to %.3fms: %v", float64(calls[mid])/1e6, r)
		if r == porcupine.Illegal {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	t.Logf("minimal failing prefix ends at call %.3fms", float64(calls[hi])/1e6)
}
