// Package telemetry serves what operators scrape from every long-running
// command: Prometheus metrics on /metrics and liveness on /healthz. Each
// process owns its registry; nothing is registered globally.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/a2farm/a2farm/schema"
)

// Metrics are the farm's instruments.
type Metrics struct {
	reg           *prometheus.Registry
	episodes      *prometheus.CounterVec
	turnLatency   prometheus.Histogram
	toolLatency   *prometheus.HistogramVec
	policyLatency prometheus.Histogram
	policyErrors  prometheus.Counter
	tokens        *prometheus.CounterVec
	groups        prometheus.Counter
	shardRows     prometheus.Counter
	indexBuilds   *prometheus.HistogramVec
	indexLoads    *prometheus.HistogramVec
	indexesOpen   prometheus.Gauge
	indexBytes    prometheus.Gauge
	indexBudget   prometheus.Gauge
	handOffs      *prometheus.CounterVec
}

// New makes the instruments in a fresh registry, with the Go runtime and
// process collectors alongside.
func New() *Metrics {
	// Latencies run from sub-millisecond tool calls to minute-long turns.
	buckets := prometheus.ExponentialBuckets(0.0005, 2.5, 14)
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		episodes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "a2farm_episodes_total",
			Help: "Episodes finished, by status."}, []string{"status"}),
		turnLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "a2farm_turn_seconds",
			Help: "Time of one agent turn: the policy call plus the tool call.", Buckets: buckets}),
		toolLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "a2farm_tool_seconds",
			Help: "Time of one tool call, by tool.", Buckets: buckets}, []string{"tool"}),
		policyLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "a2farm_policy_seconds",
			Help: "Time of one policy (chat completion) call.", Buckets: buckets}),
		policyErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "a2farm_policy_errors_total",
			Help: "Episodes ended by a policy error."}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "a2farm_tokens_total",
			Help: "Policy tokens, by kind (prompt, completion)."}, []string{"kind"}),
		groups: prometheus.NewCounter(prometheus.CounterOpts{Name: "a2farm_groups_closed_total",
			Help: "Instance groups closed by the learner (shards written)."}),
		shardRows: prometheus.NewCounter(prometheus.CounterOpts{Name: "a2farm_shard_rows_total",
			Help: "Training rows written to shards."}),
		indexBuilds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "a2farm_index_build_seconds",
			Help:    "Snapshot indexes a worker built itself, by outcome (ok, error); across the farm, about one per snapshot.",
			Buckets: buckets}, []string{"outcome"}),
		indexLoads: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "a2farm_index_load_seconds",
			Help:    "Snapshot indexes a worker loaded instead of building: from its host's cache or the farm's shared store (cache, shared).",
			Buckets: buckets}, []string{"from"}),
		indexesOpen: prometheus.NewGauge(prometheus.GaugeOpts{Name: "a2farm_worker_indexes_open",
			Help: "Snapshot indexes the worker holds open (in use or kept for the next job)."}),
		indexBytes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "a2farm_worker_index_bytes",
			Help: "Estimated memory of the worker's open indexes."}),
		indexBudget: prometheus.NewGauge(prometheus.GaugeOpts{Name: "a2farm_worker_index_budget_bytes",
			Help: "The worker's bound on the memory of open indexes (--index-memory)."}),
		handOffs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "a2farm_jobs_handed_off_total",
			Help: "Jobs this worker could not play and handed to a named worker that can, by why (snapshot: it lacks the repository or commit; policy: it does not serve the model)."},
			[]string{"why"}),
	}
	m.reg.MustRegister(m.episodes, m.turnLatency, m.toolLatency, m.policyLatency, m.policyErrors, m.tokens,
		m.groups, m.shardRows, m.indexBuilds, m.indexLoads, m.indexesOpen, m.indexBytes, m.indexBudget, m.handOffs,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Gatherer exposes the registry (tests, and embedding in another server).
func (m *Metrics) Gatherer() prometheus.Gatherer { return m.reg }

// IndexReady records a snapshot index a worker opened, by where it came
// from: "built" (or failed: err), or loaded from its host's "cache" or the
// farm's "shared" store.
func (m *Metrics) IndexReady(took time.Duration, from string, err error) {
	switch {
	case err != nil:
		m.indexBuilds.WithLabelValues("error").Observe(took.Seconds())
	case from == "built":
		m.indexBuilds.WithLabelValues("ok").Observe(took.Seconds())
	default:
		m.indexLoads.WithLabelValues(from).Observe(took.Seconds())
	}
}

// IndexMemory records a worker's open indexes: how many, their estimated
// bytes and its budget.
func (m *Metrics) IndexMemory(open int, bytes, budget int64) {
	m.indexesOpen.Set(float64(open))
	m.indexBytes.Set(float64(bytes))
	m.indexBudget.Set(float64(budget))
}

// HandedOff counts a job a worker handed to another, by why.
func (m *Metrics) HandedOff(why string) { m.handOffs.WithLabelValues(why).Inc() }

// ObserveTrajectory counts a finished episode and its turns.
func (m *Metrics) ObserveTrajectory(tr schema.Trajectory) {
	m.episodes.WithLabelValues(string(tr.Status)).Inc()
	if tr.Status == schema.StatusPolicyError {
		m.policyErrors.Inc()
	}
	m.tokens.WithLabelValues("prompt").Add(float64(tr.PromptTokens))
	m.tokens.WithLabelValues("completion").Add(float64(tr.CompletionTokens))
	for _, t := range tr.Turns {
		m.policyLatency.Observe(t.PolicyLatencyMS / 1e3)
		m.turnLatency.Observe((t.PolicyLatencyMS + t.ToolLatencyMS) / 1e3)
		if t.ToolName != "" {
			m.toolLatency.WithLabelValues(t.ToolName).Observe(t.ToolLatencyMS / 1e3)
		}
	}
}

// GroupClosed counts a group the learner wrote and its rows.
func (m *Metrics) GroupClosed(rows int) {
	m.groups.Inc()
	m.shardRows.Add(float64(rows))
}

// QueueDepth reads the jobs queue: not yet delivered, and delivered but
// not acknowledged.
type QueueDepth func(ctx context.Context) (pending, inFlight uint64, err error)

// WatchQueue exports the queue depth, read from the server at each scrape
// so that every process reports the same number.
func (m *Metrics) WatchQueue(depth QueueDepth) {
	m.watchPair(depth, "a2farm_queue_pending", "Jobs not yet delivered to a worker",
		"a2farm_queue_in_flight", "Jobs delivered and not yet acknowledged")
}

// LearnerBacklog reads the learner's side of the trajectory log:
// trajectories not yet delivered to it, and delivered but not archived.
type LearnerBacklog func(ctx context.Context) (waiting, archiving uint64, err error)

// WatchLearner exports the learner's backlog, read at each scrape.
func (m *Metrics) WatchLearner(backlog LearnerBacklog) {
	m.watchPair(backlog, "a2farm_learner_backlog", "Trajectories not yet delivered to the learner",
		"a2farm_learner_archiving", "Trajectories delivered to the learner and not yet archived")
}

// watchPair registers two gauges that one read of the server fills.
func (m *Metrics) watchPair(read func(context.Context) (uint64, uint64, error), name1, help1, name2, help2 string) {
	const unknown = " (-1: the server could not be asked)."
	m.reg.MustRegister(&pairCollector{read: read,
		first:  prometheus.NewDesc(name1, help1+unknown, nil, nil),
		second: prometheus.NewDesc(name2, help2+unknown, nil, nil)})
}

// pairCollector asks the server once per scrape for two gauges.
type pairCollector struct {
	read          func(ctx context.Context) (uint64, uint64, error)
	first, second *prometheus.Desc
}

func (c *pairCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.first
	ch <- c.second
}

func (c *pairCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	a, b, err := c.read(ctx)
	first, second := float64(a), float64(b)
	if err != nil {
		first, second = -1, -1 // visible in dashboards as "unknown", not as zero
	}
	ch <- prometheus.MustNewConstMetric(c.first, prometheus.GaugeValue, first)
	ch <- prometheus.MustNewConstMetric(c.second, prometheus.GaugeValue, second)
}

// Health reports whether the process can do its work.
type Health func(ctx context.Context) error

// Serve answers /metrics and /healthz on ln until ctx ends. The caller
// listens, so a taken port is reported before any work starts.
func Serve(ctx context.Context, ln net.Listener, m *Metrics, health Health, log zerolog.Logger) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := health(ctx); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}()
	log.Info().Str("addr", ln.Addr().String()).Msg("serving /metrics and /healthz")
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Replica is one policy server as a worker sees it.
type Replica struct {
	Model, URL       string
	InFlight         int
	Requests, Errors int64
	Healthy          bool
}

// WatchReplicas exports each policy server's requests, errors, episodes
// in flight and health, read from the worker at each scrape.
func (m *Metrics) WatchReplicas(read func() []Replica) {
	labels := []string{"model", "replica"}
	m.reg.MustRegister(&replicaCollector{read: read,
		requests: prometheus.NewDesc("a2farm_policy_replica_requests_total", "Chat requests sent to a policy server.", labels, nil),
		errors: prometheus.NewDesc("a2farm_policy_replica_errors_total",
			"Chat requests to a policy server that failed after the client's retries.", labels, nil),
		inFlight: prometheus.NewDesc("a2farm_policy_replica_episodes_in_flight", "Episodes bound to a policy server now.", labels, nil),
		healthy: prometheus.NewDesc("a2farm_policy_replica_healthy",
			"1 while a policy server answers, 0 while it is skipped with back-off.", labels, nil)})
}

// replicaCollector reads the replicas once per scrape.
type replicaCollector struct {
	read                                func() []Replica
	requests, errors, inFlight, healthy *prometheus.Desc
}

func (c *replicaCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.requests
	ch <- c.errors
	ch <- c.inFlight
	ch <- c.healthy
}

func (c *replicaCollector) Collect(ch chan<- prometheus.Metric) {
	for _, r := range c.read() {
		healthy := 0.0
		if r.Healthy {
			healthy = 1
		}
		ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(r.Requests), r.Model, r.URL)
		ch <- prometheus.MustNewConstMetric(c.errors, prometheus.CounterValue, float64(r.Errors), r.Model, r.URL)
		ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(r.InFlight), r.Model, r.URL)
		ch <- prometheus.MustNewConstMetric(c.healthy, prometheus.GaugeValue, healthy, r.Model, r.URL)
	}
}
