package side

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestGo: every function handed to Go runs exactly once, also when many
// are handed at once (more than there are idle helpers), and the helpers
// exit once idle.
func TestGo(t *testing.T) {
	before := runtime.NumGoroutine()
	const n = 1000
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		ran = make(map[int]int)
	)
	for i := range n {
		wg.Add(1)
		Go(func() {
			defer wg.Done()
			mu.Lock()
			ran[i]++
			mu.Unlock()
		})
	}
	wg.Wait()
	for i := range n {
		if ran[i] != 1 {
			t.Fatalf("function %d ran %d times", i, ran[i])
		}
	}
	deadline := time.Now().Add(Idle + 10*time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond) // polling for the helpers' exit, with a deadline
	}
	if got := runtime.NumGoroutine(); got > before {
		t.Fatalf("%d goroutines after the helpers' idle time, %d before", got, before)
	}
}
