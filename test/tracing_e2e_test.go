package test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/jingwei/jingwei/schema"
	"github.com/jingwei/jingwei/stream/streamtest"
	"github.com/jingwei/jingwei/tools"
	"github.com/jingwei/jingwei/worker"
)

// otlpSink is an OTLP/HTTP trace endpoint that decodes the real protobuf
// export requests jingwei's processes send, and keeps their spans with
// the service that sent them.
type otlpSink struct {
	mu    sync.Mutex
	spans []sunk
}

type sunk struct {
	service string
	span    *tracepb.Span
}

func (o *otlpSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	var req coltrace.ExportTraceServiceRequest
	if r.URL.Path != "/v1/traces" || proto.Unmarshal(b, &req) != nil {
		http.Error(w, "not an OTLP/HTTP protobuf trace export", http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	for _, rs := range req.ResourceSpans {
		svc := ""
		for _, a := range rs.GetResource().GetAttributes() {
			if a.Key == "service.name" {
				svc = a.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				o.spans = append(o.spans, sunk{svc, sp})
			}
		}
	}
	o.mu.Unlock()
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// find returns the spans named name whose trace is tid or that link to it.
func (o *otlpSink) find(name, tid string) []sunk {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []sunk
	for _, s := range o.spans {
		if s.span.Name != name {
			continue
		}
		hit := hex.EncodeToString(s.span.TraceId) == tid
		for _, l := range s.span.Links {
			hit = hit || hex.EncodeToString(l.TraceId) == tid
		}
		if hit {
			out = append(out, s)
		}
	}
	return out
}

// TestTraceExportedAcrossSIGKILL runs real processes — jingwei serve (its
// recovery worker) and two tool workers — with only the standard OTEL_*
// environment pointing at an OTLP/HTTP endpoint of the test. An agent's
// request (traceparent header) reaches worker A, whose payment body runs
// and is SIGKILLed mid-call; worker B takes the session over. The
// endpoint receives, as protobuf over OTLP, A's StartToolCall in the
// request's trace, B's takeover and the recovery worker's assessment
// linked to it.
func TestTraceExportedAcrossSIGKILL(t *testing.T) {
	sink := &otlpSink{}
	srv := httptest.NewServer(sink)
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100") // ms: A's spans leave before it dies
	s := newApprovalStack(t)
	a := s.worker("tw-a", "--tool-delay-after", "1m")

	const tid = "4bf92f3577b34da6a3ce929d0e0e4736"
	b, _ := json.Marshal(schema.Request{V: 1, RequestID: "r-1", Session: "pay-t", Task: worker.DefaultTask, Tool: tools.PaymentsCharge, Arguments: json.RawMessage(`{"account":"acct-1","amount_cents":700}`)})
	msg := nats.NewMsg(s.topo.Names().RequestsSubject("pay-t"))
	msg.Data = b
	msg.Header.Set("traceparent", "00-"+tid+"-00f067aa0ba902b7-01")
	if _, err := s.agentJS.PublishMsg(context.Background(), msg, jetstream.WithMsgID("r-1")); err != nil {
		t.Fatal(err)
	}
	streamtest.Eventually(t, waitLimit, "the charge is booked and A's start exported", func() bool {
		led, err := s.tools.Ledger(context.Background())
		return err == nil && len(led) == 1 && len(sink.find("StartToolCall:"+tools.PaymentsCharge, tid)) > 0
	})
	a.kill()
	s.leaseGone("pay-t")
	s.worker("tw-b")
	streamtest.Eventually(t, waitLimit, "the takeover and the assessment exported, linked to the request's trace", func() bool {
		return len(sink.find("jw.takeover", tid)) > 0 && len(sink.find("jw.assessment", tid)) > 0
	})
	start := sink.find("StartToolCall:"+tools.PaymentsCharge, tid)[0]
	if start.service != "jingwei-worker" || hex.EncodeToString(start.span.TraceId) != tid {
		t.Errorf("A's StartToolCall from %q in trace %x", start.service, start.span.TraceId)
	}
	as := sink.find("jw.assessment", tid)[0]
	if hex.EncodeToString(as.span.TraceId) == tid || len(as.span.Links) == 0 {
		t.Errorf("the assessment is not a trace of its own linked to the call's")
	}
	for _, a := range as.span.Attributes {
		if a.Key == "jingwei.decision" && a.GetValue().GetStringValue() != string(schema.DecisionNeedsReview) {
			t.Errorf("assessment decision %v", a.GetValue())
		}
	}
}
