package operation

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/space-sandbox/space/internal/store"
)

// metrics are the engine's Prometheus series; nil-safe when not registered.
type metrics struct {
	submittedTotal *prometheus.CounterVec
	finishedTotal  *prometheus.CounterVec
	duration       *prometheus.HistogramVec
	shareWaits     prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	if reg == nil {
		return nil
	}
	m := &metrics{
		submittedTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "space", Name: "operations_submitted_total",
			Help: "Operations submitted, by type.",
		}, []string{"type"}),
		finishedTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "space", Name: "operations_finished_total",
			Help: "Operations that reached a terminal state, by type and outcome (succeeded, failed, cancelled).",
		}, []string{"type", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "space", Name: "operation_duration_seconds",
			Help:    "Time operation handlers ran, by type.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
		}, []string{"type"}),
		shareWaits: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "space", Name: "operation_tenant_share_waits_total",
			Help: "Operations that waited because their tenant held its whole share of the engine's slots.",
		}),
	}
	reg.MustRegister(m.submittedTotal, m.finishedTotal, m.duration, m.shareWaits)
	return m
}

func (m *metrics) submitted(t store.OperationType) {
	if m != nil {
		m.submittedTotal.WithLabelValues(string(t)).Inc()
	}
}

func (m *metrics) finished(t store.OperationType, s store.OperationState) {
	if m != nil {
		m.finishedTotal.WithLabelValues(string(t), string(s)).Inc()
	}
}

func (m *metrics) observe(t store.OperationType, d time.Duration) {
	if m != nil {
		m.duration.WithLabelValues(string(t)).Observe(d.Seconds())
	}
}

func (m *metrics) waitedForShare() {
	if m != nil {
		m.shareWaits.Inc()
	}
}
