package policy

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/a2farm/a2farm/internal/llm"
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
	// BaseURL serves any model name (one vLLM server with several LoRA
	// adapters, say); empty for none.
	BaseURL string
	// Models maps a model or adapter name to the server that serves it;
	// it wins over BaseURL.
	Models map[string]string
	// APIKey is sent to every endpoint; RequestTimeout bounds one attempt.
	APIKey         string
	RequestTimeout time.Duration
}

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
	if cfg.Replay != nil {
		r.Register(schema.PolicyReplay, func(schema.Job) (agent.Model, error) { return cfg.Replay, nil })
	}
	return r, nil
}

type endpoint struct {
	client *llm.Client
	name   string
}

type endpoints struct {
	fallback *endpoint
	models   map[string]*endpoint
}

func newEndpoints(cfg EndpointConfig) (*endpoints, error) {
	dial := func(raw string) (*endpoint, error) {
		c, err := llm.New(llm.Config{BaseURL: raw, APIKey: cfg.APIKey, Timeout: cfg.RequestTimeout})
		if err != nil {
			return nil, err
		}
		return &endpoint{client: c, name: RedactURL(raw)}, nil
	}
	eps := &endpoints{models: map[string]*endpoint{}}
	if cfg.BaseURL != "" {
		ep, err := dial(cfg.BaseURL)
		if err != nil {
			return nil, err
		}
		eps.fallback = ep
	}
	for model, raw := range cfg.Models {
		if model == "" {
			return nil, fmt.Errorf("endpoint %s: empty model name", RedactURL(raw))
		}
		ep, err := dial(raw)
		if err != nil {
			return nil, fmt.Errorf("endpoint for %s: %w", model, err)
		}
		eps.models[model] = ep
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

func (e *endpoints) model(job schema.Job) (agent.Model, error) {
	ep := e.models[job.Policy.Model]
	if ep == nil {
		ep = e.fallback
	}
	if ep == nil {
		served := slices.Sorted(maps.Keys(e.models))
		if len(served) == 0 {
			return nil, fmt.Errorf("%w: model %q: this process has no OpenAI-compatible endpoint (--base-url or --endpoint MODEL=URL)",
				ErrUnservable, job.Policy.Model)
		}
		return nil, fmt.Errorf("%w: model %q has no endpoint here (served: %s)", ErrUnservable, job.Policy.Model,
			strings.Join(served, ", "))
	}
	return NewOpenAI(ep.client, ep.name, job.Policy, job.Sampling)
}
