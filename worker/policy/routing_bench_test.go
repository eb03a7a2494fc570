package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/a2farm/a2farm/internal/llm"
	"github.com/a2farm/a2farm/schema"
	"github.com/a2farm/a2farm/worker/agent"
)

// prefixCachingReplica stands in for a vLLM replica with automatic prefix
// caching: it remembers, per episode (by the episode header), the tokens
// of the last request and reply it served, and counts as recomputed the
// prompt tokens beyond that cached prefix. A token is four bytes of
// message text, roughly what BPE tokenizers give for code.
type prefixCachingReplica struct {
	mu         sync.Mutex
	cached     map[string]int64
	recomputed atomic.Int64
	prompt     atomic.Int64
}

const replyText = "I will search for the function that handles this next."

func (p *prefixCachingReplica) serve(tb testing.TB) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Messages []llm.Message `json:"messages"`
		}
		data, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(data, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var tokens int64
		for _, m := range req.Messages {
			tokens += int64(len(m.Content)+3) / 4
		}
		episode := r.Header.Get(DefaultEpisodeHeader)
		p.mu.Lock()
		hit := min(p.cached[episode], tokens)
		p.cached[episode] = tokens + int64(len(replyText)+3)/4
		p.mu.Unlock()
		p.prompt.Add(tokens)
		p.recomputed.Add(tokens - hit)
		fmt.Fprintf(w, `{"choices":[{"message":{"role":"assistant","content":%q}}],"usage":{"prompt_tokens":%d}}`, replyText, tokens)
	}))
	tb.Cleanup(srv.Close)
	return srv
}

// BenchmarkRoutingPrefixReuse plays 100 episodes of 10 turns (1,000
// turns, 8 episodes at a time, each turn adding a 2,000-byte
// observation) against 1, 2 and 8 prefix-caching replicas, routed sticky
// or round-robin, and reports the prompt tokens the replicas recompute
// per 1,000 turns.
func BenchmarkRoutingPrefixReuse(b *testing.B) {
	const episodes, turns, parallel = 100, 10, 8
	observation := strings.Repeat("def handler(request):\n    return route(request)\n", 50)[:2000]
	for _, routing := range []Routing{RouteSticky, RouteRoundRobin} {
		for _, n := range []int{1, 2, 8} {
			b.Run(fmt.Sprintf("%s/replicas=%d", routing, n), func(b *testing.B) {
				var servers []*prefixCachingReplica
				var urls []string
				for range n {
					p := &prefixCachingReplica{cached: map[string]int64{}}
					servers = append(servers, p)
					urls = append(urls, p.serve(b).URL+"/v1")
				}
				rs, err := newReplicas("m", urls, EndpointConfig{Routing: routing, EpisodeHeader: DefaultEpisodeHeader})
				if err != nil {
					b.Fatal(err)
				}
				round := 0
				for b.Loop() {
					round++
					next := make(chan int, episodes)
					for e := range episodes {
						next <- e
					}
					close(next)
					var wg sync.WaitGroup
					for range parallel {
						wg.Go(func() {
							for e := range next {
								if err := playTurns(rs, fmt.Sprintf("bench/%d/%d", round, e), turns, observation); err != nil {
									b.Error(err)
									return
								}
							}
						})
					}
					wg.Wait()
				}
				var recomputed, prompt int64
				for _, p := range servers {
					recomputed += p.recomputed.Load()
					prompt += p.prompt.Load()
				}
				played := float64(b.N * episodes * turns)
				b.ReportMetric(float64(recomputed)/played*1000, "recomputed-tokens/1k-turns")
				b.ReportMetric(float64(prompt)/played*1000, "prompt-tokens/1k-turns")
			})
		}
	}
}

// playTurns plays one episode of a growing conversation through OpenAI.
func playTurns(rs *Replicas, episode string, turns int, observation string) error {
	o, err := NewOpenAI(rs, episode, schema.Policy{Kind: schema.PolicyOpenAI, Model: "m"}, schema.Sampling{})
	if err != nil {
		return err
	}
	defer o.Close()
	msgs := []llm.Message{{Role: "system", Content: strings.Repeat("You localize code. ", 50)}, {Role: "user", Content: "The issue: " + episode}}
	for turn := range turns {
		reply, err := o.Next(context.Background(), agent.ModelRequest{Messages: msgs, Turn: turn})
		if err != nil {
			return err
		}
		msgs = append(msgs, reply.Message, llm.Message{Role: "user", Content: observation})
	}
	return nil
}
