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
		Init  state `json:"init"`
		Start int64 `json:"window_start_ns"`
		End   int64 `json:"window_end_ns"`
		Ops   []op  `json:"ops"`
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
	hs := history(w, 0, os.Getenv("FENCE_TORTURE_STRICT_ACQUIRE") == "1")
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
