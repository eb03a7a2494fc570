package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/a2farm/a2farm/coordinator/dataset"
	"github.com/a2farm/a2farm/internal/gitrepo"
	"github.com/a2farm/a2farm/internal/llm"
	"github.com/a2farm/a2farm/schema"
	"github.com/a2farm/a2farm/worker"
	"github.com/a2farm/a2farm/worker/agent"
	"github.com/a2farm/a2farm/worker/policy"
)

func newLocalizeCmd(e *env) *cobra.Command {
	var (
		datasetPath, reposDir, out, policyName string
		samples, limit, concurrency            int
		seed                                   int64
		strict                                 bool
		agentCfg                               agent.Config
		wallTime                               time.Duration
		cf                                     cacheFlags
		pf                                     policyFlags
	)
	cmd := &cobra.Command{
		Use:   "localize --dataset FILE --repos DIR --policy heuristic --samples N --out DIR",
		Short: "Run the agent over a dataset in one process and write trajectories and predictions",
		Long: `localize plays --samples episodes per instance (no NATS) and writes
DIR/trajectories/<instance>.arrow (one Arrow IPC stream per instance, one row per
turn) and DIR/loc_outputs.jsonl (one row per instance and sample: found_files,
found_modules, found_entities, raw_output). Score them with a2farm eval.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if datasetPath == "" || reposDir == "" || out == "" {
				return usagef("--dataset, --repos and --out are required")
			}
			model, err := pf.model(policyName)
			if err != nil {
				return err
			}
			agentCfg.TextMode = pf.textMode
			if samples < 1 || limit < 0 || concurrency < 0 {
				return usagef("--samples must be >= 1, --limit and --concurrency >= 0")
			}
			opts, err := cf.options()
			if err != nil {
				return err
			}
			repos := gitrepo.NewSet(reposDir)
			defer repos.Close()
			ds, err := dataset.Load(cmd.Context(), datasetPath, dataset.Options{Strict: strict, Repos: repos})
			if err != nil {
				return err
			}
			for _, s := range ds.Skipped {
				e.log.Warn().Int("line", s.Line).Str("instance", s.InstanceID).Msg("skipping row: " + s.Reason)
			}
			instances := ds.Instances
			if limit > 0 && limit < len(instances) {
				instances = instances[:limit]
			}
			agentCfg.WallTime = wallTime
			report, finish := e.progress("rollouts")
			trs, err := worker.Localize(cmd.Context(), worker.LocalizeConfig{
				Instances: instances, Repos: repos, Model: model, Policy: schema.Policy{Kind: policyName, Model: pf.modelName},
				Sampling: schema.Sampling{Temperature: pf.temperature, TopP: pf.topP, RepetitionPenalty: pf.repPenalty, MaxTokens: int64(pf.maxTokens)},
				Agent:    agentCfg, Index: opts, Samples: samples, Concurrency: concurrency, Seed: seed, Out: out, Log: e.log,
				Progress: report,
			})
			finish()
			if err != nil {
				return err
			}
			status := map[string]int{}
			turns := 0
			for _, tr := range trs {
				status[tr.Status]++
				turns += len(tr.Turns)
			}
			fmt.Fprintf(e.stdout, "%d rollouts (%d turns) over %d instances: %v\n  predictions %s\n  trajectories %s\n",
				len(trs), turns, len(instances), status, filepath.Join(out, "loc_outputs.jsonl"), filepath.Join(out, "trajectories"))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&datasetPath, "dataset", "", "dataset JSONL or Parquet")
	f.StringVar(&reposDir, "repos", envOr("A2FARM_REPOS", ""), "folder of git repositories named owner__name (env A2FARM_REPOS)")
	f.StringVar(&out, "out", "", "output folder")
	f.StringVar(&policyName, "policy", "heuristic", "policy: heuristic (built in), openai (any OpenAI-compatible server) or replay (recorded trajectories)")
	f.IntVar(&samples, "samples", 1, "episodes per instance")
	f.IntVar(&limit, "limit", 0, "run only the first K instances (0: all)")
	f.IntVar(&concurrency, "concurrency", 4, "episodes in flight")
	f.Int64Var(&seed, "seed", 42, "random seed of the policy")
	f.BoolVar(&strict, "strict", false, "fail on the first bad dataset row")
	f.IntVar(&agentCfg.MaxToolCalls, "max-tool-calls", 20, "tool calls per episode before the final answer")
	f.IntVar(&agentCfg.MaxContextTokens, "max-context-tokens", 40000, "model context; older observations are trimmed past 70% of it")
	f.DurationVar(&wallTime, "episode-timeout", 15*time.Minute, "wall time of one episode")
	cf.bind(cmd)
	pf.bind(cmd)
	return cmd
}

// policyFlags configure the openai and replay policies.
type policyFlags struct {
	modelName, baseURL, keyEnv, replayDir string
	temperature, topP, repPenalty         float64
	topK, maxTokens                       int
	textMode, logprobs                    bool
	timeout                               time.Duration
}

func (p *policyFlags) bind(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&p.modelName, "model", envOr("A2FARM_MODEL", ""), "model name served by --base-url (env A2FARM_MODEL)")
	f.StringVar(&p.baseURL, "base-url", envOr("A2FARM_BASE_URL", ""), "OpenAI-compatible API root, e.g. http://localhost:8000/v1 (env A2FARM_BASE_URL)")
	f.StringVar(&p.keyEnv, "api-key-env", "OPENAI_API_KEY", "environment variable holding the API key")
	f.Float64Var(&p.temperature, "temperature", 1.0, "sampling temperature (0: greedy, for evaluation)")
	f.Float64Var(&p.topP, "top-p", 0.8, "nucleus sampling (0: not sent)")
	f.IntVar(&p.topK, "top-k", 0, "top-k sampling, sent as a vLLM extra field (0: not sent)")
	f.Float64Var(&p.repPenalty, "repetition-penalty", 1.05, "vLLM repetition penalty (0: not sent)")
	f.IntVar(&p.maxTokens, "max-tokens", 4096, "completion tokens per turn")
	f.BoolVar(&p.textMode, "text-mode", false, "describe tools in the prompt and parse <function=...> calls (servers without a tool parser)")
	f.BoolVar(&p.logprobs, "logprobs", false, "record token ids and log-probabilities returned by the server")
	f.DurationVar(&p.timeout, "request-timeout", 2*time.Minute, "timeout of one policy request (retried with backoff on 429/5xx)")
	f.StringVar(&p.replayDir, "replay", "", "trajectories folder to replay (--policy replay)")
}

func (p *policyFlags) model(kind string) (agent.Model, error) {
	switch kind {
	case "heuristic":
		return policy.Heuristic{}, nil
	case "replay":
		if p.replayDir == "" {
			return nil, usagef("--policy replay needs --replay DIR (a trajectories folder)")
		}
		return policy.LoadReplay(p.replayDir)
	case "openai":
		if p.baseURL == "" || p.modelName == "" {
			return nil, usagef("--policy openai needs --base-url and --model")
		}
		client, err := llm.New(llm.Config{BaseURL: p.baseURL, APIKey: os.Getenv(p.keyEnv), Timeout: p.timeout})
		if err != nil {
			return nil, &usageError{err}
		}
		m, err := policy.NewOpenAI(policy.OpenAIConfig{Client: client, Model: p.modelName, Temperature: p.temperature,
			TopP: p.topP, TopK: p.topK, RepetitionPenalty: p.repPenalty, MaxTokens: p.maxTokens, Logprobs: p.logprobs})
		if err != nil {
			return nil, &usageError{err}
		}
		return m, nil
	}
	return nil, usagef("--policy %q: want heuristic, openai or replay", kind)
}
