package supervise

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

var errFatal = errors.New("fatal")

func isFatal(err error) bool { return errors.Is(err, errFatal) }

// TestKeepUpRerunsUntilPermanent reruns a failing attempt, reports it not
// ready with why, ready once it says so, and stops on a permanent error.
func TestKeepUpRerunsUntilPermanent(t *testing.T) {
	h := NewHealth(zerolog.Nop())
	runs := 0
	err := KeepUp(context.Background(), h, "thing", isFatal, func(_ context.Context, ready func()) error {
		runs++
		switch runs {
		case 1:
			return errors.New("no server")
		case 2:
			ready()
			if ok, _ := h.Get(); !ok {
				t.Error("not ready after ready()")
			}
			return nil // stopped: rerun
		}
		return errFatal
	})
	if !errors.Is(err, errFatal) || runs != 3 {
		t.Fatalf("KeepUp = %v after %d runs, want the permanent error after 3", err, runs)
	}
	if ok, why := h.Get(); ok || why != "fatal" {
		t.Errorf("health = %v %q, want not ready: fatal", ok, why)
	}
}

// TestWaitFor gives up at the deadline with the last error, and tries
// once with d <= 0.
func TestWaitFor(t *testing.T) {
	tries := 0
	op := func(context.Context) error { tries++; return errors.New("down") }
	if err := WaitFor(context.Background(), zerolog.Nop(), "x", 0, isFatal, op); err == nil || tries != 1 {
		t.Errorf("d=0: %v after %d tries, want one try", err, tries)
	}
	tries = 0
	if err := WaitFor(context.Background(), zerolog.Nop(), "x", 600*time.Millisecond, isFatal, op); err == nil || tries < 2 {
		t.Errorf("d=600ms: %v after %d tries, want retries", err, tries)
	}
}

func TestServeHealthz(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := NewHealth(zerolog.Nop())
	if err := h.Serve(ctx, addr); err != nil {
		t.Fatal(err)
	}
	get := func() (int, string) {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(); code != http.StatusServiceUnavailable || !strings.Contains(body, "not ready: starting") {
		t.Errorf("starting: %d %q", code, body)
	}
	h.Set(true, "")
	if code, body := get(); code != http.StatusOK || body != "ready\n" {
		t.Errorf("ready: %d %q", code, body)
	}
}
