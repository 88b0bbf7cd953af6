package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDeploymentSettingsMustMatch: a deployment set up with --partitions 8
// and the default lease TTL refuses, at start, a worker or recovery worker
// with --partitions 16, and a worker with another --lease-ttl: each names
// the setting and both values and exits 1 (a topology conflict), without
// waiting. --partitions out of range is a usage error.
func TestDeploymentSettingsMustMatch(t *testing.T) {
	kd, url := keyedServer(t)

	if code, stdout, stderr := runCLI("setup", "--server", url, "--auth", string(kd), "--partitions", "8"); code != exitOK {
		t.Fatalf("setup --partitions 8: exit %d\n%s\n%s", code, stdout, stderr)
	}
	// The same settings again are fine.
	if code, _, stderr := runCLI("setup", "--server", url, "--auth", string(kd), "--partitions", "8", "--wait", "0"); code != exitOK {
		t.Fatalf("setup --partitions 8 again: exit %d %s", code, stderr)
	}
	if code, _, stderr := runCLI("setup", "--server", url, "--auth", string(kd), "--wait", "0"); code != exitFailure || !strings.Contains(stderr, "partitions 8") || !strings.Contains(stderr, "needs 32") {
		t.Errorf("setup with the default partitions on an 8-partition topology: exit %d %q; want 1 naming partitions 8 and 32", code, stderr)
	}
	for _, c := range []struct {
		name       string
		args       []string
		field      string
		have, want string
	}{
		{"worker --partitions 16", []string{"worker", "--partitions", "16"}, "partitions", "8", "16"},
		{"recover --partitions 16", []string{"recover", "--partitions", "16"}, "partitions", "8", "16"},
		{"worker --lease-ttl 3s", []string{"worker", "--partitions", "8", "--lease-ttl", "3s"}, "lease_ttl", "10s", "3s"},
	} {
		t0 := time.Now()
		args := append(c.args, "--server", url, "--auth", string(kd), "--log-level", "warn")
		code, _, stderr := runCLI(args...)
		if code != exitFailure || !strings.Contains(stderr, "existing stream") ||
			!strings.Contains(stderr, c.field+" "+c.have) || !strings.Contains(stderr, "needs "+c.want) {
			t.Errorf("%s: exit %d, %q; want 1 naming %s %s and %s", c.name, code, stderr, c.field, c.have, c.want)
		}
		if took := time.Since(t0); took > 15*time.Second {
			t.Errorf("%s: refused after %s, want at start", c.name, took)
		}
	}
	for _, args := range [][]string{
		{"setup", "--partitions", "0"},
		{"worker", "--partitions", "1025"},
		{"recover", "--partitions", "-1"},
		{"serve", "--partitions", "0"},
	} {
		if code, _, stderr := runCLI(args...); code != exitUsage || !strings.Contains(stderr, "--partitions") {
			t.Errorf("%v: exit %d %q, want %d naming --partitions", args, code, stderr, exitUsage)
		}
	}
}

// TestServeKeepsItsPartitions: serve made with --partitions 8 refuses to
// start again on the same data with --partitions 16, naming partitions
// and both values.
func TestServeKeepsItsPartitions(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	_, _, stop := startServe(t, dir, "--no-worker", "--partitions", "8")
	if code := stop(); code != exitOK {
		t.Fatalf("serve exited %d", code)
	}
	code, _, stderr := runCLI("serve", "--listen", "127.0.0.1:-1", "--data", dir, "--no-worker", "--sync", "interval", "--lease-ttl", "1s", "--partitions", "16")
	if code != exitFailure || !strings.Contains(stderr, "partitions 8") || !strings.Contains(stderr, "needs 16") {
		t.Fatalf("serve --partitions 16 on an 8-partition topology: exit %d, %q", code, stderr)
	}
}
