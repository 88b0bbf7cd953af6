package metrics

import (
	"github.com/nats-io/nats-server/v2/server"
	"github.com/prometheus/client_golang/prometheus"
)

// NATSServer exports the metrics of an embedded NATS server (`jingwei
// serve`'s): read at each scrape from the server's own monitoring, in
// process (Varz and Jsz, what its HTTP monitoring port would serve), so
// nothing else has to listen. Safe for concurrent use.
type NATSServer struct {
	srv *server.Server

	connections, totalConns, subscriptions, slowConsumers       *prometheus.Desc
	inMsgs, outMsgs, inBytes, outBytes                          *prometheus.Desc
	jsStorage, jsMemory, jsReservedStorage, jsStreams, jsConsum *prometheus.Desc
	jsMessages, jsBytes, jsAPITotal, jsAPIErrors, jsAPIInflight *prometheus.Desc
	up                                                          *prometheus.Desc
}

// NewNATSServer registers the metrics of srv on reg, each named
// jingwei_nats_…:
//
//	jingwei_nats_connections                      clients connected now
//	jingwei_nats_connections_total                clients ever connected
//	jingwei_nats_subscriptions                    subscriptions now
//	jingwei_nats_slow_consumers_total             clients dropped as slow consumers
//	jingwei_nats_{in,out}_{messages,bytes}_total  traffic
//	jingwei_nats_jetstream_storage_bytes          JetStream file storage used
//	jingwei_nats_jetstream_memory_bytes           JetStream memory storage used
//	jingwei_nats_jetstream_reserved_storage_bytes file storage reserved by limits
//	jingwei_nats_jetstream_streams, _consumers    assets
//	jingwei_nats_jetstream_messages, _bytes       messages stored, their bytes
//	jingwei_nats_jetstream_api_requests_total     JetStream API requests
//	jingwei_nats_jetstream_api_errors_total       of them answered with an error
//	jingwei_nats_jetstream_api_inflight           being served now
//	jingwei_nats_up                               1 when the last scrape read the server
func NewNATSServer(reg prometheus.Registerer, srv *server.Server) *NATSServer {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(Namespace, "nats", name), help, nil, nil)
	}
	m := &NATSServer{
		srv:               srv,
		connections:       d("connections", "Clients connected to the embedded NATS server now."),
		totalConns:        d("connections_total", "Clients the embedded NATS server has accepted since it started."),
		subscriptions:     d("subscriptions", "Subscriptions on the embedded NATS server now."),
		slowConsumers:     d("slow_consumers_total", "Clients the embedded NATS server dropped as slow consumers since it started."),
		inMsgs:            d("in_messages_total", "Messages the embedded NATS server received."),
		outMsgs:           d("out_messages_total", "Messages the embedded NATS server sent."),
		inBytes:           d("in_bytes_total", "Bytes of messages the embedded NATS server received."),
		outBytes:          d("out_bytes_total", "Bytes of messages the embedded NATS server sent."),
		jsStorage:         d("jetstream_storage_bytes", "JetStream file storage in use on the embedded server."),
		jsMemory:          d("jetstream_memory_bytes", "JetStream memory storage in use on the embedded server."),
		jsReservedStorage: d("jetstream_reserved_storage_bytes", "JetStream file storage reserved by stream limits."),
		jsStreams:         d("jetstream_streams", "JetStream streams on the embedded server."),
		jsConsum:          d("jetstream_consumers", "JetStream consumers on the embedded server."),
		jsMessages:        d("jetstream_messages", "Messages stored in the embedded server's streams."),
		jsBytes:           d("jetstream_bytes", "Bytes stored in the embedded server's streams."),
		jsAPITotal:        d("jetstream_api_requests_total", "JetStream API requests the embedded server received."),
		jsAPIErrors:       d("jetstream_api_errors_total", "JetStream API requests the embedded server answered with an error."),
		jsAPIInflight:     d("jetstream_api_inflight", "JetStream API requests being served now."),
		up:                d("up", "1 when the last scrape read the embedded NATS server's monitoring, 0 when it could not."),
	}
	reg.MustRegister(m)
	return m
}

func (m *NATSServer) descs() []*prometheus.Desc {
	return []*prometheus.Desc{m.connections, m.totalConns, m.subscriptions, m.slowConsumers, m.inMsgs, m.outMsgs, m.inBytes, m.outBytes,
		m.jsStorage, m.jsMemory, m.jsReservedStorage, m.jsStreams, m.jsConsum, m.jsMessages, m.jsBytes, m.jsAPITotal, m.jsAPIErrors, m.jsAPIInflight, m.up}
}

// Describe is prometheus.Collector's.
func (m *NATSServer) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range m.descs() {
		ch <- d
	}
}

// Collect is prometheus.Collector's.
func (m *NATSServer) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	counter := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	v, err := m.srv.Varz(nil)
	if err != nil {
		gauge(m.up, 0)
		return
	}
	gauge(m.connections, float64(v.Connections))
	counter(m.totalConns, float64(v.TotalConnections))
	gauge(m.subscriptions, float64(v.Subscriptions))
	counter(m.slowConsumers, float64(v.SlowConsumers))
	counter(m.inMsgs, float64(v.InMsgs))
	counter(m.outMsgs, float64(v.OutMsgs))
	counter(m.inBytes, float64(v.InBytes))
	counter(m.outBytes, float64(v.OutBytes))
	js, err := m.srv.Jsz(nil)
	if err != nil || js.Disabled {
		gauge(m.up, 0)
		return
	}
	gauge(m.jsStorage, float64(js.Store))
	gauge(m.jsMemory, float64(js.Memory))
	gauge(m.jsReservedStorage, float64(js.ReservedStore))
	gauge(m.jsStreams, float64(js.Streams))
	gauge(m.jsConsum, float64(js.Consumers))
	gauge(m.jsMessages, float64(js.Messages))
	gauge(m.jsBytes, float64(js.Bytes))
	counter(m.jsAPITotal, float64(js.API.Total))
	counter(m.jsAPIErrors, float64(js.API.Errors))
	gauge(m.jsAPIInflight, float64(js.API.Inflight))
	gauge(m.up, 1)
}
