package demo

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/worker/service"
)

// proberKey writes the prober's seed (the recovery worker runs a prober
// with it: recover --probe-key) and returns its path and public key.
func (s *story) proberKey() (path, pub string, err error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return "", "", err
	}
	seed, _ := kp.Seed()
	pub, _ = kp.PublicKey()
	path = filepath.Join(s.dir, "prober.nk")
	return path, pub, os.WriteFile(path, append(seed, '\n'), 0o600)
}

// waitProbe waits for the prober's review of a payment on record (how
// the recovery worker judges it, jw.api.status with the call): the review
// that decides it (completed or not_executed), or the evidence a probe
// that could not decide left for the person who reviews.
func (s *story) waitProbe(ctx context.Context, session, callID string) (service.ReviewCheck, error) {
	ctx, cancel := s.step(ctx)
	defer cancel()
	for {
		st, err := s.host().Status(ctx, service.StatusRequest{Session: session, CallID: callID})
		if err == nil {
			for _, c := range st.Reviews {
				if c.Review.Automated() && c.Accepted {
					return c, nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return service.ReviewCheck{}, fmt.Errorf("%w: no review of call %s by the prober within the step timeout (last status error: %v)", ErrStory, callID, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// probeSettled reports whether the prober's review decides the call.
func probeSettled(c service.ReviewCheck) bool {
	return c.Decides && (c.Review.Verdict == schema.VerdictCompleted || c.Review.Verdict == schema.VerdictNotExecuted)
}
