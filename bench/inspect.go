package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"runtime"
	"time"

	"github.com/jingwei/jingwei/bench/histgen"
	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream/natsnode"
)

// inspectTarget: planning recovery from a history costs little more than
// reading it — at most 1.2 × the decode time (the ratio is inspect time / decode time, lower is better).
var inspectTarget = Target{Check: RatioAtMost, Limit: 1.2}

func inspectStep(cfg Config) step {
	events := schema.MaxHistoryEvents
	if cfg.Scale < 1 {
		events = max(int(float64(events)*cfg.Scale), 100)
	}
	name := fmt.Sprintf("Inspect vs decode, %d-event history", events)
	return ratioStep("inspect", name, natsnode.SyncInterval, "ms", inspectTarget,
		func(ctx context.Context, _ *env) ([]float64, []float64, error) {
			return inspectVsDecode(ctx, events, max(cfg.Rounds, 5))
		})
}

// inspectVsDecode times, per round, recovery.Inspect of the last call of a
// generated history read from JSON Lines, and the plain decode of the same
// bytes with schema.HistoryReader, in milliseconds. Both start from a
// collected heap, so neither pays for the other's garbage. It does not use
// the server.
func inspectVsDecode(ctx context.Context, events, rounds int) (jw, raw []float64, err error) {
	h := histgen.Generate(histgen.Config{Events: events})
	data, last := h.JSONL, h.LastCall
	jwRound := func(context.Context, int) (float64, error) {
		runtime.GC()
		start := time.Now()
		a, err := recovery.Inspect(schema.NewHistoryReader(bytes.NewReader(data), schema.DefaultLimits).All(), last)
		d := time.Since(start)
		if err != nil {
			return 0, fmt.Errorf("Inspect: %w", err)
		}
		if a.CallID != last {
			return 0, fmt.Errorf("Inspect assessed %q, want %q", a.CallID, last)
		}
		return ms(d), nil
	}
	rawRound := func(context.Context, int) (float64, error) {
		runtime.GC()
		start := time.Now()
		r := schema.NewHistoryReader(bytes.NewReader(data), schema.DefaultLimits)
		n := 0
		for {
			_, err := r.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				return 0, fmt.Errorf("decode: %w", err)
			}
			n++
		}
		d := time.Since(start)
		if n != events {
			return 0, fmt.Errorf("decoded %d events, want %d", n, events)
		}
		return ms(d), nil
	}
	return alternate(ctx, rounds, jwRound, rawRound)
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }
