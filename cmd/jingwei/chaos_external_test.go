package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jingwei/jingwei/stream/access"
)

// TestChaosAgainstServeWithAuth: `jingwei chaos --server URL --auth DIR`
// against a `jingwei serve` with authorization on (the test's, random
// port, temporary data) runs with the role keys serve made — its own
// connections as admin, agent, reviewer and host, its tool worker and
// recovery worker (child processes, the real binary) with theirs and the
// planner key — and every must-hold invariant is 0. With credentials the
// server refuses (another deployment's keys) it fails within seconds,
// naming the role and the key file, instead of retrying until its start
// timeout; with none at all it is a usage error saying where they come
// from.
func TestChaosAgainstServeWithAuth(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs a short chaos run")
	}
	bin := buildJingwei(t)
	data := filepath.Join(t.TempDir(), "data") // serve makes it 0700
	url, _, _ := startServe(t, data)
	auth := filepath.Join(data, "auth")
	small := smallChaos(t, bin)

	t.Run("credentials", func(t *testing.T) {
		checkSmallChaos(t, append([]string{"chaos", "--server", url, "--auth", auth}, small...))
	})

	t.Run("refused", func(t *testing.T) {
		other := access.KeyDir(filepath.Join(t.TempDir(), "auth"))
		if _, err := other.Init(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var out, errb lockedBuffer
		t0 := time.Now()
		code := run(ctx, append([]string{"chaos", "--server", url, "--auth", string(other)}, small...), &out, &errb)
		took := time.Since(t0)
		msg := errb.String()
		if code != exitFailure || took > 10*time.Second || !strings.Contains(msg, "refused role admin") || !strings.Contains(msg, other.SeedFile(access.RoleAdmin)) {
			t.Errorf("another deployment's keys: exit %d after %s, stderr %q; want 1 within seconds naming role admin and its key file", code, took, msg)
		}
	})

	t.Run("none", func(t *testing.T) {
		t.Chdir(t.TempDir()) // no ./.jingwei/auth
		t.Setenv("JINGWEI_AUTH", "")
		var out, errb lockedBuffer
		code := run(context.Background(), append([]string{"chaos", "--server", url}, small...), &out, &errb)
		if code != exitUsage || !strings.Contains(errb.String(), "--auth DIR") {
			t.Errorf("no credentials: exit %d, stderr %q; want 2 naming --auth DIR", code, errb.String())
		}
	})
}

// checkSmallChaos runs the small chaos run args and checks that it
// completed with every must-hold invariant met and every action's call.
func checkSmallChaos(t *testing.T, args []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out, errb lockedBuffer
	code := run(ctx, args, &out, &errb)
	var rep struct {
		Error string `json:"error"`
		Ex    struct {
			Calls int `json:"calls"`
		} `json:"exercised"`
		Rows []struct {
			Invariant string `json:"invariant"`
			Met       bool   `json:"met"`
			Must      bool   `json:"must"`
		} `json:"rows"`
	}
	if err := json.Unmarshal([]byte(out.String()), &rep); err != nil {
		t.Fatalf("exit %d; stdout is not the JSON report: %v\n%s\nstderr:\n%s", code, err, out.String(), errb.String())
	}
	if code != exitOK || rep.Error != "" {
		t.Errorf("exit %d, error %q\nstderr:\n%s", code, rep.Error, errb.String())
	}
	musts := 0
	for _, r := range rep.Rows {
		if r.Must {
			musts++
			if !r.Met {
				t.Errorf("must-hold invariant %q not met", r.Invariant)
			}
		}
	}
	if musts < 10 || rep.Ex.Calls < 16 {
		t.Errorf("%d must-hold rows, %d calls: the run did not run (want every row and the 16 actions' calls)", musts, rep.Ex.Calls)
	}
}

// smallChaos are the flags of a small external run: 16 actions, one tool
// worker, no faults.
func smallChaos(t *testing.T, bin string) []string {
	return []string{"--quick", "--json", "--seed", "7", "--actions", "16", "--sessions", "4", "--duration", "4s", "--workers", "1",
		"--recoverer-kills", "0", "--pauses", "0", "--kill-every", "0", "--lease-ttl", "1s", "--exe", bin, "--dir", t.TempDir()}
}

// buildJingwei builds the binary the chaos runs' child processes run.
func buildJingwei(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "jingwei")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestChaosOperatorCreds: against a server in operator mode (JWT
// accounts), `jingwei chaos --server URL --auth DIR --operator` connects
// every role, its own connections and its child processes, with
// DIR/<role>.creds as 'jingwei auth creds' writes them, and runs with
// every must-hold invariant met; without --operator the same directory's
// seeds are refused at once, naming the role.
func TestChaosOperatorCreds(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs a short chaos run")
	}
	bin := buildJingwei(t)
	operatorSeed, ojwt, sys, sysJWT := testOperator(t)
	dir := filepath.Join(t.TempDir(), "keys")
	if st, _, errOut := runCLI("auth", "init", "--dir", dir); st != exitOK {
		t.Fatalf("auth init: %s", errOut)
	}
	if st, _, errOut := runCLI("auth", "creds", "--dir", dir, "--operator-seed", operatorSeed); st != exitOK {
		t.Fatalf("auth creds: %s", errOut)
	}
	url := operatorServer(t, dir, ojwt, sys, sysJWT)

	var out, errb lockedBuffer
	t0 := time.Now()
	code := run(context.Background(), append([]string{"chaos", "--server", url, "--auth", dir}, smallChaos(t, bin)...), &out, &errb)
	if took := time.Since(t0); code != exitFailure || took > 10*time.Second || !strings.Contains(errb.String(), "refused role admin") {
		t.Errorf("seeds on an operator-mode server: exit %d after %s, stderr %q; want 1 at once naming role admin", code, took, errb.String())
	}
	checkSmallChaos(t, append([]string{"chaos", "--server", url, "--auth", dir, "--operator"}, smallChaos(t, bin)...))
}
