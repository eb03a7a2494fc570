package policy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/a2farm/a2farm/internal/bus"
	"github.com/a2farm/a2farm/internal/llm"
	"github.com/a2farm/a2farm/worker/agent"
)

// Routing says how a new episode picks its replica.
type Routing string

const (
	// RouteSticky (the default) keeps an episode on one replica for all
	// its turns and sends a new one to the replica with the fewest
	// episodes in flight: every turn re-sends the growing conversation,
	// which the replica that served the previous turn has in its prefix
	// cache.
	RouteSticky Routing = "sticky"
	// RouteRoundRobin sends every request to the next healthy replica, as
	// a plain load balancer does (for comparison; it throws the prefix
	// cache away).
	RouteRoundRobin Routing = "round-robin"
)

// Replica health: a replica whose request failed after the client's
// retries is skipped for a back-off that doubles from minBackoff to
// maxBackoff with every failure in a row; then it is probed (or tried by
// the next episode) and comes back by itself when it answers.
const (
	minBackoff   = time.Second
	maxBackoff   = 10 * time.Second
	probeTimeout = 5 * time.Second
)

// replica is one server of a model.
type replica struct {
	name   string // the URL without credentials
	base   string // the API root, for probes
	client *llm.Client

	// loading serialises run-time adapter loads on this replica, so that
	// the episodes that find an adapter missing at once load it once.
	loading sync.Mutex

	// Guarded by Replicas.mu.
	lacks     map[string]time.Time // model → skipped for it until then (a load failed)
	inFlight  int                  // episodes bound to it
	requests  int64                // chat requests sent
	errors    int64                // requests that failed after the client's retries
	failures  int                  // failures in a row
	checked   bool                 // it has answered or failed once
	down      bool
	downUntil time.Time // skipped until then, then probed
}

// Replicas are the servers of one model (or, for --base-url, of any
// model): it binds episodes to replicas and tracks their health. It is
// safe for concurrent use.
type Replicas struct {
	model     string // "" for the servers of any model
	routing   Routing
	header    string // the request header carrying the episode id
	probeHTTP *http.Client

	mu       sync.Mutex
	replicas []*replica
	next     int       // round-robin position
	outSince time.Time // when the last answering replica went down; zero while one answers
}

// ReplicaStats is what a worker reports of one replica.
type ReplicaStats = bus.ReplicaLoad

// ErrNoReplica marks a request no replica of the model answered: an
// infrastructure outage, never the policy's own doing (it wraps
// agent.ErrUnavailable).
var ErrNoReplica = fmt.Errorf("%w: no replica of the model answers", agent.ErrUnavailable)

func newReplicas(model string, urls []string, cfg EndpointConfig) (*Replicas, error) {
	rs := &Replicas{model: model, routing: cfg.Routing, header: cfg.EpisodeHeader,
		probeHTTP: &http.Client{Timeout: probeTimeout}}
	if rs.routing == "" {
		rs.routing = RouteSticky
	}
	if rs.routing != RouteSticky && rs.routing != RouteRoundRobin {
		return nil, fmt.Errorf("policy routing %q: want %s or %s", cfg.Routing, RouteSticky, RouteRoundRobin)
	}
	seen := map[string]bool{}
	for _, raw := range urls {
		if seen[raw] {
			return nil, fmt.Errorf("replica %s is given twice", RedactURL(raw))
		}
		seen[raw] = true
		c, err := llm.New(llm.Config{BaseURL: raw, APIKey: cfg.APIKey, Timeout: cfg.RequestTimeout,
			MaxRetries: cfg.MaxRetries, Backoff: cfg.RetryBackoff})
		if err != nil {
			return nil, err
		}
		rs.replicas = append(rs.replicas, &replica{name: RedactURL(raw), base: strings.TrimRight(raw, "/"), client: c})
	}
	return rs, nil
}

// Model is the model these replicas serve ("*": any).
func (rs *Replicas) Model() string {
	if rs.model == "" {
		return "*"
	}
	return rs.model
}

// acquire binds a new episode to a replica: prefer when it is one of
// these and healthy (a branch goes where its parent's prefix is cached),
// else the healthy replica with the fewest episodes in flight. A replica
// whose back-off is over counts as healthy again: the episode tries it.
func (rs *Replicas) acquire(prefer, model string, except *replica) (*replica, error) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	now := time.Now()
	var best *replica
	lacking := 0
	for i := range rs.replicas {
		// Start the scan after the last pick, so that ties rotate.
		r := rs.replicas[(rs.next+i)%len(rs.replicas)]
		if r == except || r.down && now.Before(r.downUntil) {
			continue
		}
		if until, ok := r.lacks[model]; ok && now.Before(until) {
			lacking++
			continue
		}
		if r.name == prefer || rs.routing == RouteRoundRobin && prefer == "" {
			best = r
			break
		}
		if best == nil || r.inFlight < best.inFlight {
			best = r
		}
	}
	if best == nil && lacking > 0 {
		return nil, fmt.Errorf("%w (%s: %d of %d replicas do not serve %s and could not load it)", ErrNoReplica, rs.Model(), lacking, len(rs.replicas), model)
	}
	if best == nil {
		return nil, fmt.Errorf("%w (%s: %d replicas, all failing)", ErrNoReplica, rs.Model(), len(rs.replicas))
	}
	rs.next = (slices.Index(rs.replicas, best) + 1) % len(rs.replicas)
	best.inFlight++
	return best, nil
}

// release unbinds an episode from r.
func (rs *Replicas) release(r *replica) {
	rs.mu.Lock()
	r.inFlight--
	rs.mu.Unlock()
}

// answered and failed record the outcome of a request to r.
func (rs *Replicas) answered(r *replica) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	r.requests++
	r.failures, r.down, r.checked = 0, false, true
	rs.outSince = time.Time{}
}

func (rs *Replicas) failed(r *replica) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	r.requests++
	r.errors++
	rs.markDownLocked(r)
}

func (rs *Replicas) markDownLocked(r *replica) {
	r.checked = true
	r.failures++
	r.down = true
	r.downUntil = time.Now().Add(min(maxBackoff, minBackoff<<min(r.failures-1, 10)))
	if rs.outSince.IsZero() && !slices.ContainsFunc(rs.replicas, func(o *replica) bool { return !o.down }) {
		rs.outSince = time.Now()
	}
}

// restore loads the adapter model from path onto r, which answered that
// it does not serve model (a restarted replica forgets the adapters loaded
// at run time). Loads on one replica are serialised; an adapter some other
// episode loaded meanwhile counts as loaded.
func (rs *Replicas) restore(ctx context.Context, r *replica, model, path string) error {
	r.loading.Lock()
	defer r.loading.Unlock()
	err := r.client.LoadLoRA(ctx, model, path)
	if errors.Is(err, llm.ErrLoRALoaded) {
		return nil
	}
	return err
}

// lack skips r for model for a while: it does not serve it and could not
// load it. Other models still go to r.
func (rs *Replicas) lack(r *replica, model string) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if r.lacks == nil {
		r.lacks = map[string]time.Time{}
	}
	r.lacks[model] = time.Now().Add(maxBackoff)
}

// Outage reports since when no replica has answered (ok false while one
// does).
func (rs *Replicas) Outage() (since time.Time, ok bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.outSince, !rs.outSince.IsZero()
}

// Probe asks every replica not heard from yet, and every failing one
// whose back-off is over, whether it answers (any HTTP answer to GET
// /models below 500 counts: the server is up); one that does is healthy,
// one that does not is skipped, backing off longer each time.
func (rs *Replicas) Probe(ctx context.Context) {
	rs.mu.Lock()
	var due []*replica
	for _, r := range rs.replicas {
		if !r.checked || r.down && !time.Now().Before(r.downUntil) {
			due = append(due, r)
		}
	}
	rs.mu.Unlock()
	for _, r := range due {
		err := rs.probe(ctx, r)
		rs.mu.Lock()
		if err == nil {
			r.failures, r.down, r.checked = 0, false, true
			rs.outSince = time.Time{}
		} else if ctx.Err() == nil {
			rs.markDownLocked(r)
		}
		rs.mu.Unlock()
	}
}

func (rs *Replicas) probe(ctx context.Context, r *replica) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.base+"/models", nil)
	if err != nil {
		return err
	}
	resp, err := rs.probeHTTP.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode >= 500 {
		return fmt.Errorf("probe %s: %s", r.name, resp.Status)
	}
	return nil
}

// Stats reports every replica, in the order they were given.
func (rs *Replicas) Stats() []ReplicaStats {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	out := make([]ReplicaStats, len(rs.replicas))
	for i, r := range rs.replicas {
		out[i] = ReplicaStats{Model: rs.Model(), URL: r.name, InFlight: r.inFlight, Requests: r.requests,
			Errors: r.errors, Healthy: !r.down}
	}
	return out
}

// unavailable reports whether a failed request says nothing of the
// policy: the server could not be reached, or answered 429 or 5xx after
// every retry. A request the server refuses (4xx) is the policy's.
func unavailable(err error) bool {
	var se *llm.StatusError
	if errors.As(err, &se) {
		return se.Retryable()
	}
	return llm.IsNetworkError(err)
}
