package fenceprom

import (
	"context"
	"errors"
	"time"

	"github.com/fencekit/fence"
)

// Observe implements fence.Observer.
func (m *Metrics) Observe(ctx context.Context, op fence.Op, lease string) (context.Context, func(fence.Event)) {
	start := m.now()
	return ctx, func(e fence.Event) { m.record(op, lease, start, e) }
}

// OnLost counts a lease lost while a runner's job ran, with the runner's
// cause. It is no longer needed with a fence.Runner: the runner reports its
// cause to observers when it marks the run lost (fence.Event.Cause), which
// Metrics counts, reason "unproven" included. It stays for callers that
// pass it as fence.OnLost(m.OnLost); a loss already counted is not counted
// again.
func (m *Metrics) OnLost(t fence.Token, cause error) {
	if cause != nil {
		m.loss(t.Lease, t.Fence, cause)
	}
}

func (m *Metrics) record(op fence.Op, name string, start time.Time, e fence.Event) {
	l := m.label(name)
	lost := errors.Is(e.Err, fence.ErrLost)
	switch op {
	case fence.OpAcquire:
		outcome := "error"
		switch {
		case e.Err == nil:
			outcome = "acquired"
			m.hold(name, e.Fence, start.Add(e.ExpiresIn))
		case errors.Is(e.Err, fence.ErrHeld):
			outcome = "held"
		}
		m.acquire.WithLabelValues(l, outcome).Inc()

	case fence.OpRenew:
		m.renew.WithLabelValues(l).Observe(m.now().Sub(start).Seconds())
		m.renewed(name, start, e)

	case fence.OpRenewBatch:
		// One call of no single lease: see the package documentation. Its
		// tokens' results are counted by their renew_batch_token.
		m.renew.WithLabelValues("").Observe(m.now().Sub(start).Seconds())

	case fence.OpRenewBatchToken:
		m.renewed(name, start, e)

	case fence.OpRelease:
		switch {
		case e.Err == nil:
			m.drop(name, e.Fence)
		case lost:
			m.loss(name, e.Fence, e.Err)
		}

	case fence.OpRevoke:
		if e.Err == nil {
			// Every fence below the new one has lost the lease; its holder
			// counts the loss when it is refused.
			m.drop(name, e.Fence-1)
		}

	case fence.OpWrite, fence.OpTx:
		result := "error"
		switch {
		case e.Err == nil:
			result = "ok"
		case lost:
			result = "stale"
			m.loss(name, e.Fence, e.Err)
		case errors.Is(e.Err, fence.ErrNoMatch):
			result = "no_match"
		}
		m.writes.WithLabelValues(l, result).Inc()

	case fence.OpStartRun:
		if e.Err == nil && e.Run != 0 {
			m.starts.WithLabelValues(l).Inc()
			m.running.WithLabelValues(l).Inc()
			m.mu.Lock()
			m.started[e.Run] = startedRun{lease: l, at: m.now()}
			m.mu.Unlock()
		}
		if lost {
			m.loss(name, e.Fence, e.Err)
		}

	case fence.OpFinishRun, fence.OpMarkRunLost:
		if e.Status != "" {
			m.finished.WithLabelValues(l, string(e.Status)).Inc()
		}
		m.ended(e)
		switch {
		case lost:
			m.loss(name, e.Fence, e.Err)
		case e.Cause != nil:
			// A runner stopped its job: at the renew deadline no refused
			// operation reports the loss, so this is where it is seen.
			m.loss(name, e.Fence, e.Cause)
		}
	}
}

// ended records the end of run e.Run, if this process started it: its
// duration, by the status it ended with (lost when its runner stopped it,
// none when the outcome is unknown), and, for a success, its time.
func (m *Metrics) ended(e fence.Event) {
	m.mu.Lock()
	r, ok := m.started[e.Run]
	delete(m.started, e.Run)
	m.mu.Unlock()
	if !ok {
		return
	}
	m.running.WithLabelValues(r.lease).Dec()
	status := e.Status
	if status == "" && e.Cause != nil {
		status = fence.RunLost // stopped by its runner; the mark did not get through
	}
	if status == "" {
		return
	}
	now := m.now()
	m.jobDur.WithLabelValues(r.lease, string(status)).Observe(now.Sub(r.at).Seconds())
	if status == fence.RunSucceeded {
		m.success.WithLabelValues(r.lease).Set(float64(now.UnixNano()) / 1e9)
	}
}

// renewed records the result of the renewal of one token of lease name,
// by Renew or within RenewBatch, whose call started at start.
func (m *Metrics) renewed(name string, start time.Time, e fence.Event) {
	l := m.label(name)
	switch {
	case e.Err == nil:
		m.hold(name, e.Fence, start.Add(e.ExpiresIn))
	case errors.Is(e.Err, fence.ErrLost):
		m.renewFail.WithLabelValues(l, "lost").Inc()
		m.loss(name, e.Fence, e.Err)
	default:
		m.renewFail.WithLabelValues(l, "error").Inc()
	}
}

// hold records that this process holds fence of lease name until deadline,
// unless it already knows a newer fence.
func (m *Metrics) hold(name string, fence int64, deadline time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if h, ok := m.held[name]; ok && h.fence > fence {
		return
	}
	m.held[name] = holding{fence: fence, deadline: deadline}
}

// drop forgets the holding of lease name if its fence is at most fence.
func (m *Metrics) drop(name string, fence int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dropLocked(name, fence)
}

func (m *Metrics) dropLocked(name string, fence int64) {
	if h, ok := m.held[name]; ok && h.fence <= fence {
		delete(m.held, name)
	}
}

// loss counts the loss of fence of lease name, once, and forgets the holding.
func (m *Metrics) loss(name string, fence int64, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dropLocked(name, fence)
	if m.lostFence[name] >= fence {
		return
	}
	m.lostFence[name] = fence
	m.lost.WithLabelValues(m.label(name), lostReason(err)).Inc()
}

// lostReason is the reason label of a lost lease's error.
func lostReason(err error) string {
	var le *fence.LostError
	switch {
	case errors.Is(err, fence.ErrUnproven):
		return "unproven"
	case errors.As(err, &le) && le.Reason != "":
		return string(le.Reason)
	}
	return string(fence.LostUnknown)
}
