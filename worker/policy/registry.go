package policy

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/a2farm/a2farm/schema"
	"github.com/a2farm/a2farm/worker/agent"
)

// ErrUnservable marks a job whose policy this process cannot serve: its
// kind is not registered, or no endpoint serves its model. Such a job is
// never played with another policy.
var ErrUnservable = errors.New("policy cannot be served here")

// Factory builds the model that plays one job, from the job's policy and
// sampling.
type Factory func(job schema.Job) (agent.Model, error)

// Registry picks a job's model by the kind its policy names. The zero
// value has no kinds; NewRegistry registers the built-in ones.
type Registry struct {
	factories map[schema.PolicyKind]Factory
	// offers are what each kind can play, as workers advertise it.
	offers map[schema.PolicyKind][]string
	// endpoints serve the openai kind (nil in a zero Registry).
	endpoints *endpoints
}

// Register makes kind playable; a second registration replaces the first.
func (r *Registry) Register(kind schema.PolicyKind, f Factory) {
	r.register(kind, f, []string{string(kind)})
}

func (r *Registry) register(kind schema.PolicyKind, f Factory, offers []string) {
	if r.factories == nil {
		r.factories, r.offers = map[schema.PolicyKind]Factory{}, map[schema.PolicyKind][]string{}
	}
	r.factories[kind], r.offers[kind] = f, offers
}

// Offers lists what the registry can play, for a worker's heartbeat: its
// kinds, with openai narrowed to "openai:MODEL" per model endpoint and
// "openai:*" for a base URL that serves any model.
func (r *Registry) Offers() []string {
	var out []string
	for _, o := range r.offers {
		out = append(out, o...)
	}
	slices.Sort(out)
	return out
}

// Offered reports whether a list of offers covers a job's policy.
func Offered(offers []string, p schema.Policy) bool {
	for _, o := range offers {
		kind, model, narrowed := strings.Cut(o, ":")
		if schema.PolicyKind(kind) == p.Kind && (!narrowed || model == "*" || model == p.Model) {
			return true
		}
	}
	return false
}

// Kinds lists the registered kinds, sorted.
func (r *Registry) Kinds() []string {
	kinds := make([]string, 0, len(r.factories))
	for k := range r.factories {
		kinds = append(kinds, string(k))
	}
	slices.Sort(kinds)
	return kinds
}

// Replicas reports every replica of every model this registry serves.
func (r *Registry) Replicas() []ReplicaStats {
	var out []ReplicaStats
	if r.endpoints != nil {
		for _, rs := range r.endpoints.sets() {
			out = append(out, rs.Stats()...)
		}
	}
	return out
}

// Outage reports whether a job's model is out: it is served by replicas
// here and none of them answers, since when. Local kinds never are.
func (r *Registry) Outage(job schema.Job) (since time.Time, out bool) {
	if job.Policy.Kind != schema.PolicyOpenAI || r.endpoints == nil {
		return time.Time{}, false
	}
	if rs := r.endpoints.serving(job.Policy.Model); rs != nil {
		return rs.Outage()
	}
	return time.Time{}, false
}

// AllOut reports whether this registry serves remote models and none of
// their replicas answers — the process can play nothing a farm sends it
// but the local kinds — and since when (the most recent set to go out).
func (r *Registry) AllOut() (since time.Time, out bool) {
	if r.endpoints == nil {
		return time.Time{}, false
	}
	sets := r.endpoints.sets()
	for _, rs := range sets {
		s, ok := rs.Outage()
		if !ok {
			return time.Time{}, false
		}
		if s.After(since) {
			since = s
		}
	}
	return since, len(sets) > 0
}

// Probe asks every failing replica whose back-off is over whether it
// answers again.
func (r *Registry) Probe(ctx context.Context) {
	if r.endpoints != nil {
		for _, rs := range r.endpoints.sets() {
			rs.Probe(ctx)
		}
	}
}

// Model builds the model for job. An error wrapping ErrUnservable means
// the job must go to a process that can serve it.
func (r *Registry) Model(job schema.Job) (agent.Model, error) {
	f, ok := r.factories[job.Policy.Kind]
	if !ok {
		return nil, fmt.Errorf("%w: policy kind %q is not served (this process serves %s)", ErrUnservable,
			job.Policy.Kind, strings.Join(r.Kinds(), ", "))
	}
	return f(job)
}

// EndpointConfig says where models are served.
type EndpointConfig struct {
	// BaseURLs are the replicas of a server that serves any model name
	// (vLLM with several LoRA adapters, say); empty for none.
	BaseURLs []string
	// Models maps a model or adapter name to the replicas that serve it;
	// it wins over BaseURLs.
	Models map[string][]string
	// APIKey is sent to every endpoint; RequestTimeout bounds one attempt,
	// MaxRetries and RetryBackoff the client's retries of one request on
	// one replica (0: the client's defaults, 4 and 500 ms doubling).
	APIKey         string
	RequestTimeout time.Duration
	MaxRetries     int
	RetryBackoff   time.Duration
	// Routing says how episodes pick replicas (default RouteSticky).
	Routing Routing
	// EpisodeHeader names the HTTP header that carries every request's
	// episode id, for a router with consistent hashing in front of the
	// replicas (default DefaultEpisodeHeader; "-": none).
	EpisodeHeader string
}

// DefaultEpisodeHeader is the header that carries a request's episode id.
const DefaultEpisodeHeader = "X-Episode-Id"

// RegistryConfig configures the registry of a process that plays jobs.
type RegistryConfig struct {
	Endpoints EndpointConfig
	// Replay, when set, serves the replay kind from these trajectories.
	Replay *Replay
}

// NewRegistry registers heuristic always, openai (with the endpoints; a
// job whose model no endpoint serves is unservable) and replay when
// recorded trajectories are given.
func NewRegistry(cfg RegistryConfig) (*Registry, error) {
	r := &Registry{}
	r.Register(schema.PolicyHeuristic, func(schema.Job) (agent.Model, error) { return Heuristic{}, nil })
	eps, err := newEndpoints(cfg.Endpoints)
	if err != nil {
		return nil, err
	}
	r.register(schema.PolicyOpenAI, eps.model, eps.offers())
	r.endpoints = eps
	if cfg.Replay != nil {
		r.Register(schema.PolicyReplay, func(schema.Job) (agent.Model, error) { return cfg.Replay, nil })
	}
	return r, nil
}

// endpoints are the replica sets of the models this process serves.
type endpoints struct {
	fallback *Replicas // nil: no server of any model
	models   map[string]*Replicas
}

func newEndpoints(cfg EndpointConfig) (*endpoints, error) {
	switch cfg.EpisodeHeader {
	case "":
		cfg.EpisodeHeader = DefaultEpisodeHeader
	case "-":
		cfg.EpisodeHeader = ""
	}
	eps := &endpoints{models: map[string]*Replicas{}}
	if len(cfg.BaseURLs) > 0 {
		rs, err := newReplicas("", cfg.BaseURLs, cfg)
		if err != nil {
			return nil, err
		}
		eps.fallback = rs
	}
	for model, urls := range cfg.Models {
		if model == "" {
			return nil, errors.New("endpoint: empty model name")
		}
		if len(urls) == 0 {
			return nil, fmt.Errorf("endpoint for %s: no URL", model)
		}
		rs, err := newReplicas(model, urls, cfg)
		if err != nil {
			return nil, fmt.Errorf("endpoint for %s: %w", model, err)
		}
		eps.models[model] = rs
	}
	return eps, nil
}

func (e *endpoints) offers() []string {
	var out []string
	if e.fallback != nil {
		out = append(out, string(schema.PolicyOpenAI)+":*")
	}
	for model := range e.models {
		out = append(out, string(schema.PolicyOpenAI)+":"+model)
	}
	return out
}

// sets lists every replica set, the any-model one first, then by model.
func (e *endpoints) sets() []*Replicas {
	var out []*Replicas
	if e.fallback != nil {
		out = append(out, e.fallback)
	}
	for _, m := range slices.Sorted(maps.Keys(e.models)) {
		out = append(out, e.models[m])
	}
	return out
}

// serving returns the replicas that serve a model.
func (e *endpoints) serving(model string) *Replicas {
	if rs := e.models[model]; rs != nil {
		return rs
	}
	return e.fallback
}

func (e *endpoints) model(job schema.Job) (agent.Model, error) {
	rs := e.serving(job.Policy.Model)
	if rs == nil {
		served := slices.Sorted(maps.Keys(e.models))
		if len(served) == 0 {
			return nil, fmt.Errorf("%w: model %q: this process has no OpenAI-compatible endpoint (--base-url or --endpoint MODEL=URL)",
				ErrUnservable, job.Policy.Model)
		}
		return nil, fmt.Errorf("%w: model %q has no endpoint here (served: %s)", ErrUnservable, job.Policy.Model,
			strings.Join(served, ", "))
	}
	return NewOpenAI(rs, EpisodeID(job), job.Policy, job.Sampling)
}

// EpisodeID identifies a job's conversation to a router: a branch
// continues its parent's, so it carries the parent's id.
func EpisodeID(job schema.Job) string {
	if job.Fork.IsBranch() {
		return job.Fork.ParentJobID
	}
	return job.JobID
}
