package test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jingwei/jingwei/stream/streamtest"
)

// lockedBuf is a buffer a process writes while the test reads it.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startWorker starts `jingwei worker` against srv with its role key; it is
// killed at the end of the test.
func startWorker(t *testing.T, bin string, srv *serveProc, args ...string) (*exec.Cmd, *lockedBuf) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"worker", "--log-format", "json"}, args...)...)
	cmd.Env = append(os.Environ(), "NATS_URL="+srv.url, "JINGWEI_AUTH="+srv.auth(), "JINGWEI_LOG_LEVEL=info")
	errb := &lockedBuf{}
	cmd.Stderr = errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	})
	return cmd, errb
}

// TestMetricsToolAfterTakeover: a payment parked for approval by one tool
// worker, that worker killed, the approval given while none runs: the
// next tool worker resumes the call and runs it, and its /metrics counts
// the call under its tool, payments.charge — never tool="unknown",
// although its tool.call was recorded by the dead process.
func TestMetricsToolAfterTakeover(t *testing.T) {
	bin := jingweiBinary(t)
	srv := startServe(t, bin, "--no-worker", "--lease-ttl", "2s")
	first, _ := startWorker(t, bin, srv, "--lease-ttl", "2s", "--require-approval", "payments.charge:amount_cents>1000")
	streamtest.Eventually(t, 30*time.Second, "the payment parked for approval", func() bool {
		jwAuth(t, bin, srv.url, srv.auth(), "call", "--session", "s-big", "--task", "t-1", "--request-id", "r-big",
			"--tool", "payments.charge", "--args", `{"account":"acct-1","amount_cents":5000}`, "--timeout", "1s")
		st := jwAuth(t, bin, srv.url, srv.auth(), "status", "--session", "s-big", "--json")
		return strings.Contains(st.stdout, `"awaiting_approval":[{`)
	})
	st := jwAuth(t, bin, srv.url, srv.auth(), "status", "--session", "s-big", "--json")
	var status struct {
		Status struct {
			AwaitingApproval []struct {
				CallID string `json:"call_id"`
			} `json:"awaiting_approval"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte(st.stdout), &status); err != nil || len(status.Status.AwaitingApproval) != 1 {
		t.Fatalf("status: %v %s", err, st.stdout)
	}
	callID := status.Status.AwaitingApproval[0].CallID
	_ = first.Process.Signal(syscall.SIGKILL)
	_ = first.Wait()

	a := jwAuth(t, bin, srv.url, srv.auth(), "approve", "--session", "s-big", "--call", callID, "--approver", "alice@finance",
		"--key", srv.data+"/approver.nk", "--json")
	t.Logf("approve while no tool worker runs: exit %d %s", a.code, a.stdout)

	_, errb := startWorker(t, bin, srv, "--lease-ttl", "2s", "--require-approval", "payments.charge:amount_cents>1000", "--metrics", "127.0.0.1:0")
	var url string
	re := regexp.MustCompile(`metrics on (http://\S+/metrics)`)
	streamtest.Eventually(t, 20*time.Second, "the second worker's metrics URL", func() bool {
		if m := re.FindStringSubmatch(errb.String()); m != nil {
			url = m[1]
			return true
		}
		return false
	})
	var body string
	streamtest.Eventually(t, 60*time.Second, "the resumed payment counted", func() bool {
		resp, err := http.Get(url)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return strings.Contains(body, `jingwei_tool_calls_total{status="ok",tool="payments.charge"} 1`)
	})
	if strings.Contains(body, `tool="unknown"`) {
		t.Fatalf("a series with tool=\"unknown\":\n%s", grepLines(body, "tool_calls_total"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
