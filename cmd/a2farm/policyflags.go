package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/a2farm/a2farm/schema"
	"github.com/a2farm/a2farm/worker"
	"github.com/a2farm/a2farm/worker/policy"
)

// runFlags are what a run decides for every job — what acts, how it
// samples, the episode limits — shared by coordinator, up and localize.
type runFlags struct {
	kind, model, version          string
	temperature, topP, repPenalty float64
	topK, maxTokens               int64
	seed                          int64
	textMode, tokenIDs, logprobs  bool
	maxToolCalls, maxContext      int64
	episodeTimeout                time.Duration
	branches, forkDepth           int64
	forkAt                        string
	branchBudget                  float64
	// given tells which flags were set on the command line.
	given func(name string) bool
}

func (f *runFlags) bind(cmd *cobra.Command, defaultKind string) {
	fs := cmd.Flags()
	f.given = fs.Changed
	fs.StringVar(&f.kind, "policy", defaultKind, "policy kind that plays the run: heuristic (built in), openai (a model on an OpenAI-compatible server) or replay (recorded trajectories)")
	fs.StringVar(&f.model, "model", envOr("A2FARM_MODEL", ""), "model or LoRA adapter name the openai policy asks the server for (env A2FARM_MODEL)")
	fs.StringVar(&f.version, "policy-version", "", "checkpoint tag recorded in every trajectory, e.g. iter1")
	fs.Float64Var(&f.temperature, "temperature", 1.0, "sampling temperature (0: greedy, for evaluation)")
	fs.Float64Var(&f.topP, "top-p", 0.8, "nucleus sampling (0: not sent)")
	fs.Int64Var(&f.topK, "top-k", 0, "top-k sampling, a vLLM/SGLang extra field (0: not sent)")
	fs.Float64Var(&f.repPenalty, "repetition-penalty", 1.05, "repetition penalty, a vLLM/SGLang extra field (0: not sent)")
	fs.Int64Var(&f.maxTokens, "max-tokens", 4096, "completion tokens per turn (0: not sent)")
	fs.Int64Var(&f.seed, "seed", 42, "run seed; sample s gets its own seed from it, turn t of the sample sends that seed + t")
	fs.BoolVar(&f.textMode, "text-mode", false, "describe tools in the system message and parse <function=...> calls (servers without a tool parser)")
	fs.BoolVar(&f.tokenIDs, "return-token-ids", false, `ask the server for prompt and completion token ids ("return_token_ids": vLLM, SGLang) and write token shards`)
	fs.BoolVar(&f.logprobs, "logprobs", false, "record the completion tokens' log-probabilities")
	fs.Int64Var(&f.maxToolCalls, "max-tool-calls", 20, "tool calls per episode before the final answer")
	fs.Int64Var(&f.maxContext, "max-context-tokens", 40000, "model context; older observations are trimmed past 70% of it")
	fs.DurationVar(&f.episodeTimeout, "episode-timeout", 15*time.Minute, "wall time of one episode (0: none)")
	fs.Int64Var(&f.branches, "branches", 0, "branch rollouts: once an instance's samples are in, fork them into this many continuations at each fork point (0: none)")
	fs.StringVar(&f.forkAt, "fork-at", "auto", "fork points of --branches: comma-separated turns (every sample forks at each it lived past), or auto (the turns whose --fork-depth history group has no sibling, cheapest first, within --branch-budget)")
	fs.Float64Var(&f.branchBudget, "branch-budget", 0.25, "auto fork points: extra turns per instance, as a share of its samples' turns")
	fs.Int64Var(&f.forkDepth, "fork-depth", 2, "auto fork points: the history depth whose groups are thinned (the learner's --H)")
}

// check names the first run flag out of its range, or a branch flag
// given without --branches.
func (f *runFlags) check() error {
	floatAtLeast0 := func(name string, v float64) error {
		if v < 0 {
			return usagef("--%s %g: want 0 or more", name, v)
		}
		return nil
	}
	intAtLeast := func(name string, v, lo int64) error {
		if v < lo {
			return usagef("--%s %d: want %d or more", name, v, lo)
		}
		return nil
	}
	checks := []error{
		intAtLeast("max-tool-calls", f.maxToolCalls, 1), intAtLeast("max-context-tokens", f.maxContext, 1),
		floatAtLeast0("temperature", f.temperature), intAtLeast("top-k", f.topK, 0),
		floatAtLeast0("repetition-penalty", f.repPenalty), intAtLeast("max-tokens", f.maxTokens, 0),
		intAtLeast("branches", f.branches, 0), floatAtLeast0("branch-budget", f.branchBudget), intAtLeast("fork-depth", f.forkDepth, 1),
	}
	if f.topP < 0 || f.topP > 1 {
		checks = append(checks, usagef("--top-p %g: want 0 to 1", f.topP))
	}
	if f.episodeTimeout < 0 {
		checks = append(checks, usagef("--episode-timeout %s: want 0 (none) or more", f.episodeTimeout))
	}
	for _, name := range []string{"fork-at", "branch-budget", "fork-depth"} {
		if f.branches == 0 && f.given != nil && f.given(name) {
			checks = append(checks, usagef("--%s needs --branches N (how many continuations fork at each point)", name))
		}
	}
	for _, err := range checks {
		if err != nil {
			return err
		}
	}
	return nil
}

// branching reads the branch flags.
func (f *runFlags) branching() (schema.Branching, error) {
	b := schema.Branching{Branches: f.branches}
	if f.branches > 0 {
		b.Budget, b.Depth = f.branchBudget, f.forkDepth
		if f.forkAt != "auto" {
			b.Budget, b.Depth = 0, 0
			for _, field := range strings.Split(f.forkAt, ",") {
				t, err := strconv.ParseInt(strings.TrimSpace(field), 10, 64)
				if err != nil || t < 1 {
					return b, usagef("--fork-at %q: want auto, or turns from 1 separated by commas (turn 0 is an independent sample)", f.forkAt)
				}
				b.ForkAt = append(b.ForkAt, t)
			}
		}
	}
	if err := b.Validate(); err != nil {
		return b, &usageError{err}
	}
	return b, nil
}

// spec validates the flags and returns the run's spec.
func (f *runFlags) spec() (schema.RunSpec, error) {
	switch schema.PolicyKind(f.kind) {
	case schema.PolicyHeuristic, schema.PolicyReplay:
	case schema.PolicyOpenAI:
		if f.model == "" {
			return schema.RunSpec{}, usagef("--policy openai needs --model (the model or adapter name the server serves)")
		}
	default:
		return schema.RunSpec{}, usagef("--policy %q: want heuristic, openai or replay", f.kind)
	}
	if err := f.check(); err != nil {
		return schema.RunSpec{}, err
	}
	s := schema.RunSpec{
		Policy: schema.Policy{Kind: schema.PolicyKind(f.kind), Model: f.model, Version: f.version, TextMode: f.textMode,
			ReturnTokenIDs: f.tokenIDs, Logprobs: f.logprobs},
		Sampling: schema.Sampling{Temperature: f.temperature, TopP: f.topP, TopK: f.topK, RepetitionPenalty: f.repPenalty,
			MaxTokens: f.maxTokens},
		Limits: schema.Limits{MaxToolCalls: f.maxToolCalls, MaxContextTokens: f.maxContext,
			WallTimeSeconds: int64(f.episodeTimeout.Round(time.Second) / time.Second)},
		Seed: f.seed,
	}
	if err := policy.ValidateSampling(s.Sampling); err != nil {
		return schema.RunSpec{}, &usageError{err}
	}
	b, err := f.branching()
	if err != nil {
		return schema.RunSpec{}, err
	}
	s.Branching = b
	return s, nil
}

// endpointFlags say where models are served — all a process that plays
// jobs knows of policies (worker, up, localize).
type endpointFlags struct {
	keyEnv, replayDir, routing, episodeHeader string
	baseURLs, endpoints                       []string
	timeout, outageBudget                     time.Duration
}

func (f *endpointFlags) bind(cmd *cobra.Command) {
	fs := cmd.Flags()
	var fromEnv []string
	if v := os.Getenv("A2FARM_BASE_URL"); v != "" {
		fromEnv = strings.Split(v, ",")
	}
	fs.StringArrayVar(&f.baseURLs, "base-url", fromEnv, "OpenAI-compatible API root serving any model name a job asks for, e.g. http://gpu-1:8000/v1; repeat it for replicas (env A2FARM_BASE_URL, comma-separated)")
	fs.StringArrayVar(&f.endpoints, "endpoint", nil, "MODEL=URL: a server of one model or adapter (repeatable; the same MODEL again adds a replica; wins over --base-url)")
	fs.StringVar(&f.keyEnv, "api-key-env", "OPENAI_API_KEY", "environment variable holding the API key")
	fs.DurationVar(&f.timeout, "request-timeout", 2*time.Minute, "timeout of one policy request (retried with backoff on 429/5xx)")
	fs.StringVar(&f.routing, "policy-routing", string(policy.RouteSticky), "how episodes pick a replica: sticky (an episode keeps to one replica, new ones go to the least busy) or round-robin (every request to the next one)")
	fs.StringVar(&f.episodeHeader, "episode-header", policy.DefaultEpisodeHeader, `HTTP header carrying each request's episode id, for a consistent-hashing router in front of the replicas ("-": none)`)
	fs.DurationVar(&f.outageBudget, "policy-outage-budget", worker.DefaultOutageBudget, "how long a job waits out an outage of its model (no replica answers) before it is given up; meanwhile it is put back, never answered")
	fs.StringVar(&f.replayDir, "replay", "", "trajectories folder that serves the replay policy")
}

// registry builds the policies this process can play.
func (f *endpointFlags) registry() (*policy.Registry, error) {
	if f.outageBudget <= 0 {
		return nil, usagef("--policy-outage-budget must be > 0, got %s", f.outageBudget)
	}
	cfg := policy.RegistryConfig{Endpoints: policy.EndpointConfig{APIKey: os.Getenv(f.keyEnv),
		RequestTimeout: f.timeout, Models: map[string][]string{}, Routing: policy.Routing(f.routing),
		EpisodeHeader: f.episodeHeader}}
	for _, u := range f.baseURLs {
		if u = strings.TrimSpace(u); u != "" {
			cfg.Endpoints.BaseURLs = append(cfg.Endpoints.BaseURLs, u)
		}
	}
	for _, e := range f.endpoints {
		model, url, ok := strings.Cut(e, "=")
		if !ok || model == "" || url == "" {
			return nil, usagef("--endpoint %q: want MODEL=URL", policy.RedactURL(e))
		}
		cfg.Endpoints.Models[model] = append(cfg.Endpoints.Models[model], url)
	}
	if f.replayDir != "" {
		r, err := policy.LoadReplay(f.replayDir)
		if err != nil {
			return nil, err
		}
		cfg.Replay = r
	}
	reg, err := policy.NewRegistry(cfg)
	if err != nil {
		return nil, &usageError{err}
	}
	return reg, nil
}

// servable checks, before any work, that this process can play the run.
func servable(reg *policy.Registry, spec schema.RunSpec) error {
	_, err := reg.Model(spec.Job("check", 0, schema.Instance{InstanceID: "check"}, 0))
	if errors.Is(err, policy.ErrUnservable) {
		hint := ""
		switch spec.Policy.Kind {
		case schema.PolicyOpenAI:
			hint = " (give --base-url or --endpoint MODEL=URL)"
		case schema.PolicyReplay:
			hint = " (give --replay DIR)"
		}
		return usagef("%v%s", err, hint)
	}
	if err != nil {
		return fmt.Errorf("policy: %w", err)
	}
	return nil
}
