package streamtest

import (
	"os"
	"testing"
	"time"
)

// LoadScaled never shortens a bound and never stretches it beyond
// maxLoadScale; with /proc it follows the load average.
func TestLoadScaled(t *testing.T) {
	const d = time.Second
	got := LoadScaled(d)
	if got < d || got > maxLoadScale*d {
		t.Fatalf("LoadScaled(%s) = %s, want within [%s, %s]", d, got, d, maxLoadScale*d)
	}
	if _, err := os.Stat("/proc/loadavg"); err != nil && got != d {
		t.Fatalf("LoadScaled(%s) = %s without /proc/loadavg, want %s", d, got, d)
	}
}
