package cli

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fence"
)

// The HOLDER column: the name as is, "(unnamed)" for a row written before
// names were recorded (holder ""), "-" for a revoked lease, and a name
// written outside fence with terminal escapes shown escaped.
func TestLeasesTableHolder(t *testing.T) {
	now := time.Now()
	ls := []fence.LeaseInfo{
		{Name: "named", State: fence.StateHeld, Holder: "web-1:42", Fence: 7, ExpiresAt: now.Add(time.Minute), DBNow: now, Remaining: time.Minute},
		{Name: "old", State: fence.StateHeld, Holder: "", Fence: 8, ExpiresAt: now.Add(time.Minute), DBNow: now, Remaining: time.Minute},
		{Name: "revoked", State: fence.StateRevoked, Holder: "", Fence: 9},
		{Name: "sneaky", State: fence.StateReleased, Holder: "web\x1b[2J\u202e1", Fence: 10},
	}
	var out bytes.Buffer
	a := &app{stdout: &out}
	if err := a.leasesTable(&out, ls); err != nil {
		t.Fatal(err)
	}
	for _, re := range []string{
		`(?m)^NAME +STATE +HOLDER +FENCE +EXPIRES IN$`,
		`(?m)^named +held +web-1:42 +7 +1m0s$`,
		`(?m)^old +held +\(unnamed\) +8 +1m0s$`,
		`(?m)^revoked +revoked +- +9 +-$`,
		`(?m)^sneaky +released +web\\x1b\[2J\\u202e1 +10 +-$`,
	} {
		if !regexp.MustCompile(re).MatchString(out.String()) {
			t.Errorf("leases table does not match %s:\n%s", re, out.String())
		}
	}
	if strings.ContainsAny(out.String(), "\x1b\u202e") {
		t.Errorf("raw control characters reached the table: %q", out.String())
	}
}

func TestRunsTableHolder(t *testing.T) {
	now := time.Now()
	var out bytes.Buffer
	a := &app{stdout: &out}
	rs := []fence.RunInfo{
		{ID: 2, Lease: "job", Fence: 8, Status: fence.RunSucceeded, Holder: "web-2:7", StartedAt: now, FinishedAt: now.Add(time.Second)},
		{ID: 1, Lease: "job", Fence: 7, Status: fence.RunLost, StartedAt: now, FinishedAt: now.Add(time.Second)},
	}
	if err := a.runsTable(&out, rs, time.Time{}); err != nil {
		t.Fatal(err)
	}
	for _, re := range []string{
		`(?m)^ID +LEASE +FENCE +STATUS +HOLDER +STARTED`,
		`(?m)^2 +job +8 +succeeded +web-2:7 +`,
		`(?m)^1 +job +7 +lost +\(unnamed\) +`,
	} {
		if !regexp.MustCompile(re).MatchString(out.String()) {
			t.Errorf("runs table does not match %s:\n%s", re, out.String())
		}
	}
}

func TestRunHolderFlagValidated(t *testing.T) {
	for _, bad := range []string{"web\x1b[31m", "web\u202e1", strings.Repeat("h", 256)} {
		o := runOpts{lease: "job", ttl: fence.DefaultTTL, argv: []string{"true"}, holder: bad}
		if err := o.validate(); err == nil || !strings.Contains(err.Error(), "--holder") {
			t.Errorf("--holder %q: %v; want a usage error", bad, err)
		}
	}
	o := runOpts{lease: "job", ttl: fence.DefaultTTL, argv: []string{"true"}, holder: "batch-7 (eu)"}
	if err := o.validate(); err != nil {
		t.Errorf("--holder batch-7 (eu): %v", err)
	}
}
