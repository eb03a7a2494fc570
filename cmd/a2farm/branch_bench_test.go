package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/a2farm/a2farm/internal/policytest"
	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/lang/python"
	"github.com/a2farm/a2farm/learner"
	"github.com/a2farm/a2farm/schema"
	"github.com/a2farm/a2farm/worker/agent"
	"github.com/a2farm/a2farm/worker/policy"
)

// prefixCache counts the prompt tokens a server's automatic prefix cache
// would reuse, as vLLM's does: prompts are cut into blocks of 16 tokens,
// a block is keyed by the hash of everything up to its end, and a request
// reuses its leading blocks whose keys an earlier request computed. The
// cache never evicts (an upper bound for a server that keeps a run's
// prefixes).
type prefixCache struct {
	mu             sync.Mutex
	seen           map[uint64]bool
	prompt, reused int64
}

const cacheBlock = 16

func (c *prefixCache) add(ids []int32) {
	h := fnv.New64a()
	var buf [4]byte
	c.mu.Lock()
	defer c.mu.Unlock()
	c.prompt += int64(len(ids))
	hit := true
	for i, id := range ids {
		binary.LittleEndian.PutUint32(buf[:], uint32(id))
		h.Write(buf[:])
		if (i+1)%cacheBlock != 0 {
			continue
		}
		key := h.Sum64()
		if hit && c.seen[key] {
			c.reused += cacheBlock
		} else {
			hit = false
		}
		c.seen[key] = true
	}
}

// heuristicServer serves the built-in heuristic policy over the OpenAI
// protocol (the in-test stand-in for a GPU server), tokenizing every
// prompt with a 4-bytes-a-token toy template into cache.
func heuristicServer(b *testing.B, runSeed int64, cache *prefixCache) *policytest.Recorder {
	tmpl := policytest.Template{BytesPerToken: 4}
	return policytest.NewRecorder(b, func(req policytest.Request) policytest.Reply {
		turn := int64(0)
		for _, m := range req.Messages {
			if m.Role == "assistant" {
				turn++
			}
		}
		ids := tmpl.Prompt(req.Messages)
		cache.add(ids)
		seed := *req.Seed - turn // the sample's seed (episodes here are never trimmed)
		sample := (seed - schema.SampleSeed(runSeed, 0)) / 1009
		reply, err := policy.Heuristic{}.Next(context.Background(), agent.ModelRequest{Messages: req.Messages,
			Seed: seed, Sample: sample, Turn: int(turn), Languages: lang.NewSet(python.Language{})})
		if err != nil {
			return policytest.Reply{Status: 400, Content: err.Error()}
		}
		return policytest.Reply{Content: reply.Message.Content, ToolCalls: reply.Message.ToolCalls, FinishReason: "tool_calls",
			PromptTokens: int64(len(ids))}
	})
}

// BenchmarkBranches compares independent sampling with branch rollouts on
// real repositories with the heuristic policy, served over the OpenAI
// protocol by an in-test server that counts the prompt tokens a prefix
// cache would reuse. For each dataset (A2FARM_BRANCH_DATA: comma-separated
// dataset.jsonl:gt.jsonl pairs, repositories in A2FARM_REPOS) it plays
// base-only runs of 8 and 10 samples and base + branch runs at several
// budgets, and prints turns, depth-2 coverage, advantage spread and prompt
// tokens. `make bench-branches`; it skips unless A2FARM_BENCH_BRANCHES is
// set.
func BenchmarkBranches(b *testing.B) {
	if os.Getenv("A2FARM_BENCH_BRANCHES") == "" {
		b.Skip("set A2FARM_BENCH_BRANCHES=1 (make bench-branches): plays a few thousand episodes on real repositories")
	}
	root, _ := filepath.Abs("../..")
	data := envOr("A2FARM_BRANCH_DATA", filepath.Join(root, "data/dev-instances.jsonl")+":"+filepath.Join(root, ".run/dev-gt.jsonl")+","+
		filepath.Join(root, ".run/xarray/dataset.jsonl")+":"+filepath.Join(root, ".run/xarray/gt.jsonl"))
	repos := envOr("A2FARM_REPOS", filepath.Join(root, ".repos"))
	cacheDir := envOr("A2FARM_CACHE", filepath.Join(root, ".run/cache"))
	type variant struct {
		name    string
		samples int
		flags   []string
	}
	variants := []variant{
		{"base 8", 8, nil},
		{"base 10", 10, nil},
		{"base 8 + branches (budget 0.25)", 8, []string{"--branches", "1", "--branch-budget", "0.25"}},
		{"base 8 + branches (budget 0.5)", 8, []string{"--branches", "1", "--branch-budget", "0.5"}},
		{"base 8 + branches (budget 1)", 8, []string{"--branches", "1", "--branch-budget", "1"}},
		{"base 8 + 2 branches (budget 1)", 8, []string{"--branches", "2", "--branch-budget", "1"}},
	}
	for range b.N {
		for _, pair := range strings.Split(data, ",") {
			dataset, gt, _ := strings.Cut(pair, ":")
			golds, err := (&goldFlags{path: gt}).load(context.Background(), nil) // a file: no env needed
			if err != nil {
				b.Fatal(err)
			}
			fmt.Printf("\n%s (%s)\n%-34s %6s %6s %7s %7s %7s %8s %11s %11s %6s %11s\n", filepath.Base(filepath.Dir(dataset))+"/"+filepath.Base(dataset),
				gt, "variant", "trajs", "turns", "x base", "cov k1", "cov k2", "adv std", "prompt tok", "reused tok", "reuse", "fresh tok")
			baseTurns := 0
			for _, v := range variants {
				cache := &prefixCache{seen: map[uint64]bool{}}
				srv := heuristicServer(b, 42, cache)
				out := b.TempDir()
				args := append([]string{"localize", "--dataset", dataset, "--repos", repos, "--cache", cacheDir, "--samples", fmt.Sprint(v.samples),
					"--policy", "openai", "--model", "heuristic", "--base-url", srv.URL, "--seed", "42", "--concurrency", "4",
					"--out", out, "--log-level", "error"}, v.flags...)
				if code, _, errOut := run(b, args...); code != 0 {
					b.Fatalf("%s: %s", v.name, errOut)
				}
				trs, err := schema.ReadTrajectoryDir(filepath.Join(out, "trajectories"))
				if err != nil {
					b.Fatal(err)
				}
				res, err := learner.Process(trs, golds, learner.DefaultConfig())
				if err != nil {
					b.Fatal(err)
				}
				d := res.Diagnostics
				if baseTurns == 0 {
					baseTurns = d.Steps
				}
				fmt.Printf("%-34s %6d %6d %6.2fx %7.3f %7.3f %8.4f %11d %11d %5.1f%% %11d\n", v.name, len(trs), d.Steps,
					float64(d.Steps)/float64(baseTurns), d.Coverage[1], d.Coverage[2], d.AdvantageStd, cache.prompt, cache.reused,
					100*float64(cache.reused)/float64(max(cache.prompt, 1)), cache.prompt-cache.reused)
			}
		}
	}
}
