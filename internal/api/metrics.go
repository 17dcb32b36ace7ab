package api

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics are the control plane's Prometheus metrics. Create them once with
// NewMetrics and pass them in Deps; BootDuration is for the worker to observe.
type Metrics struct {
	Registry *prometheus.Registry

	// RequestDuration is labelled by route pattern, method and status.
	RequestDuration *prometheus.HistogramVec
	// BootDuration is how long a sandbox's VM took from start to a ready
	// agent, in seconds. The worker observes it.
	BootDuration prometheus.Histogram
	// Sandboxes is the number of sandboxes by state, refreshed on scrape.
	Sandboxes *prometheus.GaugeVec
}

// NewMetrics creates the metrics on a fresh registry that also carries the Go
// runtime and process collectors. Pass Registry to operation.Config.Registerer
// so operations by type and outcome are served on /metrics too.
func NewMetrics() *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		Registry: reg,
		RequestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "space", Subsystem: "http", Name: "request_duration_seconds",
			Help:    "Latency of HTTP requests by route pattern and status (streams count until they end).",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"route", "method", "status"}),
		BootDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "space", Subsystem: "vm", Name: "boot_duration_seconds",
			Help:    "Time from VMM start to a ready guest agent.",
			Buckets: []float64{.05, .1, .25, .5, 1, 2, 3, 5, 8, 13, 20, 30, 60},
		}),
		Sandboxes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "space", Name: "sandboxes",
			Help: "Sandboxes by state (all tenants).",
		}, []string{"state"}),
	}
	reg.MustRegister(m.RequestDuration, m.BootDuration, m.Sandboxes,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
