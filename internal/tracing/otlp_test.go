package tracing_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/jingwei/jingwei/internal/tracing"
)

// otlpReceiver is an OTLP/HTTP endpoint that decodes the real protobuf
// export requests the SDK's exporter sends.
type otlpReceiver struct {
	mu      sync.Mutex
	spans   []*tracepb.Span
	service []string
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "not an OTLP/HTTP protobuf trace export", http.StatusBadRequest)
		return
	}
	b, _ := io.ReadAll(r.Body)
	var req coltrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	for _, rs := range req.ResourceSpans {
		for _, a := range rs.GetResource().GetAttributes() {
			if a.Key == "service.name" {
				o.service = append(o.service, a.GetValue().GetStringValue())
			}
		}
		for _, ss := range rs.ScopeSpans {
			o.spans = append(o.spans, ss.Spans...)
		}
	}
	o.mu.Unlock()
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// TestSetupExportsOverOTLP: with only the standard OTEL_* variables set,
// Setup exports spans over OTLP/HTTP; a span continued from the trace
// context carried in a NATS header is in the same trace, its parent the
// sender's span.
func TestSetupExportsOverOTLP(t *testing.T) {
	recv := &otlpReceiver{}
	srv := httptest.NewServer(recv)
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_SERVICE_NAME", "jingwei-e2e")
	ctx := context.Background()
	shutdown, err := tracing.Setup(ctx, "jingwei-test")
	if err != nil {
		t.Fatal(err)
	}
	if !tracing.Enabled() {
		t.Fatal("tracing off with OTEL_EXPORTER_OTLP_ENDPOINT set")
	}
	sctx, send := tracing.Publish(ctx, "jw.requests.s-1", "")
	h := nats.Header{}
	if !tracing.Inject(sctx, h) {
		t.Fatal("nothing injected")
	}
	send.End()
	_, recvSpan := tracing.Consume(tracing.Extract(ctx, h), "jw.request", "jw.requests.s-1")
	recvSpan.End()
	if err := shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if tracing.Enabled() {
		t.Fatal("tracing still on after shutdown")
	}
	recv.mu.Lock()
	defer recv.mu.Unlock()
	if len(recv.spans) != 2 {
		t.Fatalf("received %d spans, want 2", len(recv.spans))
	}
	byName := map[string]*tracepb.Span{}
	for _, s := range recv.spans {
		byName[s.Name] = s
	}
	snd, got := byName["send jw.requests.s-1"], byName["jw.request"]
	if snd == nil || got == nil {
		t.Fatalf("spans %v", byName)
	}
	if string(got.TraceId) != string(snd.TraceId) || string(got.ParentSpanId) != string(snd.SpanId) {
		t.Fatal("the consumer span is not the producer span's child in its trace")
	}
	if snd.Kind != tracepb.Span_SPAN_KIND_PRODUCER || got.Kind != tracepb.Span_SPAN_KIND_CONSUMER {
		t.Fatalf("kinds %v %v", snd.Kind, got.Kind)
	}
	if len(recv.service) == 0 || recv.service[0] != "jingwei-e2e" {
		t.Fatalf("service.name %v", recv.service)
	}
}

// TestOffWithoutOTEL: with no OTEL_* variable Setup leaves tracing off,
// and nothing is put on a message.
func TestOffWithoutOTEL(t *testing.T) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER", "OTEL_SDK_DISABLED"} {
		t.Setenv(k, "")
	}
	shutdown, err := tracing.Setup(context.Background(), "x")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = shutdown(context.Background()) }()
	if tracing.Enabled() {
		t.Fatal("tracing on without OTEL_*")
	}
	ctx, sp := tracing.Start(context.Background(), "x")
	sp.End()
	h := nats.Header{}
	if tracing.Inject(ctx, h) || len(h) != 0 {
		t.Fatalf("headers %v", h)
	}
}
