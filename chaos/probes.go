package chaos

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/jingwei/jingwei/schema"
)

// probeWait is how long the host waits for the prober's review of a
// needs_review payment before a person (the harness's reviewer) reviews it.
const probeWait = 3 * time.Second

// proberKey writes the seed the harness's recovery worker runs its prober
// with (recover --probe-key) and returns its path.
func (h *harness) proberKey() (string, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return "", err
	}
	seed, _ := kp.Seed()
	path := filepath.Join(h.dir, "prober.nk")
	return path, os.WriteFile(path, append(seed, '\n'), 0o600)
}

// probes reports whether the harness's recovery worker runs a prober.
func (h *harness) probes() bool { return !h.cfg.NoProbes && h.cfg.Mode != ModeExternal }

// probeVerdict waits up to probeWait for an automated review of k (the
// prober's) on JW_REVIEWS and returns its verdict: completed or
// not_executed when the probe settled the call, uncertain when it could
// not decide, "" when none came.
func (c *clients) probeVerdict(ctx context.Context, k callKey) schema.Verdict {
	deadline := time.Now().Add(probeWait)
	for {
		v := c.readProbeVerdict(ctx, k)
		if v != "" || time.Now().After(deadline) || ctx.Err() != nil {
			return v
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
}

func (c *clients) readProbeVerdict(ctx context.Context, k callKey) schema.Verdict {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := c.adminJS.Stream(ctx, streamReviews)
	if err != nil {
		return ""
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subjectPrefix + ".reviews." + k.Session}})
	if err != nil {
		return ""
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return ""
	}
	var out schema.Verdict
	for n := info.NumPending; n > 0; n-- {
		m, err := cons.Next(jetstream.FetchMaxWait(2 * time.Second))
		if err != nil {
			return out
		}
		var rv schema.Review
		if json.Unmarshal(m.Data(), &rv) != nil || rv.CallID != k.CallID || !rv.Automated() {
			continue
		}
		if out == "" || rv.Verdict != schema.VerdictUncertain {
			out = rv.Verdict
		}
	}
	return out
}

// probeCounts sums the final snapshot's reviews up by who settled each
// call: a probe (an automated completed or not_executed review), a probe
// that could not decide (only an automated uncertain), and the people
// (the harness's reviewer) — with how many of those the probe left no
// review at all (it failed, or never ran: a recovery worker killed before
// its prober took the call up).
func probeCounts(x *index, e *Exercised) {
	e.SettledByProbes, e.SettledByPeople = map[string]int{}, map[string]int{}
	for _, rs := range x.reviews {
		var probe, person schema.Verdict
		undecided := false
		for _, r := range rs {
			switch {
			case r.Review.Automated() && r.Review.Verdict == schema.VerdictUncertain:
				undecided = true
			case r.Review.Automated():
				if probe == "" {
					probe = r.Review.Verdict
				}
			default:
				if person == "" {
					person = r.Review.Verdict
				}
			}
		}
		switch {
		case probe != "":
			e.SettledByProbes[string(probe)]++
		case undecided:
			e.ProbesUndecided++
		}
		if person != "" {
			e.SettledByPeople[string(person)]++
			if probe == "" && !undecided {
				e.PeopleWithoutProbe++
			}
		}
	}
}
