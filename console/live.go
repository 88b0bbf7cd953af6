package console

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/jingwei/jingwei/worker/service"
)

// hub tells the open /live streams that something changed.
type hub struct {
	mu      sync.Mutex
	version uint64
	subs    map[chan uint64]struct{}
	closed  bool
}

func newHub() *hub { return &hub{subs: map[chan uint64]struct{}{}} }

// notify bumps the version and wakes every subscriber (a subscriber that
// has not read the previous version yet gets the latest only).
func (h *hub) notify() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.version++
	for ch := range h.subs {
		select {
		case <-ch:
		default:
		}
		ch <- h.version
	}
}

// subscribe returns a channel of versions and the current version; a nil
// channel means the hub is closed.
func (h *hub) subscribe() (chan uint64, uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, h.version
	}
	ch := make(chan uint64, 1)
	h.subs[ch] = struct{}{}
	return ch, h.version
}

func (h *hub) unsubscribe(ch chan uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.subs[ch]; ok {
		delete(h.subs, ch)
		close(ch)
	}
}

// close ends every subscription (Run stopped).
func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for ch := range h.subs {
		delete(h.subs, ch)
		close(ch)
	}
}

// fingerprint is a digest of what the pages show that can change: the
// recovery worker's status (open calls, calls awaiting review or
// approval, stopped tasks, plan counts) and the last sequences of the
// session logs, the reviews and the approvals.
func (c *Console) fingerprint(ctx context.Context) (string, error) {
	st, err := c.reviewer.Status(ctx, service.StatusRequest{})
	if err != nil {
		return "", err
	}
	st.Stats = service.Stats{} // EventsSeen moves with every event; the seqs below cover it
	topo, err := c.topology(ctx)
	if err != nil {
		return "", err
	}
	seqs := map[string]uint64{}
	for _, kind := range []string{"EVENTS", "REVIEWS", "APPROVALS"} {
		ictx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
		s, err := c.hostJS.Stream(ictx, topo.Names().StreamName(kind))
		if err == nil {
			var info, ierr = s.Info(ictx)
			if ierr == nil {
				seqs[kind] = info.State.LastSeq
			}
			err = ierr
		}
		cancel()
		if err != nil {
			return "", fmt.Errorf("stream %s: %w", topo.Names().StreamName(kind), err)
		}
	}
	b, err := json.Marshal(struct {
		S service.Status
		Q map[string]uint64
	}{st, seqs})
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// handleLive is /live: a Server-Sent Events stream that sends "change"
// with a version number whenever Run saw a change, and a comment every
// 15 s so proxies keep it open. The page's script reloads its live parts
// on each change.
func (c *Console) handleLive(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	ch, v := c.live.subscribe()
	if ch == nil {
		http.Error(w, "the console is stopping", http.StatusServiceUnavailable)
		return
	}
	defer c.live.unsubscribe(ch)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, "retry: 2000\nevent: hello\ndata: %d\n\n", v)
	fl.Flush()
	keep := time.NewTicker(15 * time.Second)
	defer keep.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case v, ok := <-ch:
			if !ok {
				return
			}
			fmt.Fprintf(w, "event: change\ndata: %d\n\n", v)
			fl.Flush()
		case <-keep.C:
			fmt.Fprint(w, ": keep-alive\n\n")
			fl.Flush()
		}
	}
}
