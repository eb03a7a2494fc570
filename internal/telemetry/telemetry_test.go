package telemetry

import (
	"context"
	"errors"
	"fmt"
	"github.com/a2farm/a2farm/internal/checkfor"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/a2farm/a2farm/internal/bus"
	"github.com/a2farm/a2farm/internal/natstest"
	"github.com/a2farm/a2farm/schema"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestMetricsAndHealth(t *testing.T) {
	_, js := natstest.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	b, err := bus.Open(ctx, js, bus.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"r/0/i/0", "r/0/i/1"} {
		if err := b.PublishJob(ctx, schema.Job{JobID: id, RunID: "r", InstanceID: "i", Attempt: 1}); err != nil {
			t.Fatal(err)
		}
	}
	// The consumer counts a stored message a moment after the publish is
	// acknowledged; wait for it so that the scrape below sees both jobs.
	checkfor.Within(t, 5*time.Second, 10*time.Millisecond, func() error {
		if pending, _, err := b.QueueDepth(ctx); err != nil || pending != 2 {
			return fmt.Errorf("the queue does not show the 2 jobs (pending %d, %v)", pending, err)
		}
		return nil
	})
	// Two trajectories wait for a learner that has created its consumer.
	if _, err := b.Traj.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: bus.LearnerConsumer,
		AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"r/0/i/0", "r/0/i/1"} {
		if err := b.PublishTrajectory(ctx, schema.Trajectory{JobID: id, RunID: "r", InstanceID: "i", Status: schema.StatusOK}); err != nil {
			t.Fatal(err)
		}
	}
	checkfor.Within(t, 5*time.Second, 10*time.Millisecond, func() error {
		if st, err := b.Learner(ctx); err != nil || st.Backlog != 2 {
			return fmt.Errorf("the learner's backlog does not show the 2 trajectories (%+v, %v)", st, err)
		}
		return nil
	})
	m := New()
	m.WatchQueue(b.QueueDepth)
	m.WatchLearner(b.LearnerBacklog)
	m.ObserveTrajectory(schema.Trajectory{Status: schema.StatusOK, PromptTokens: 100, CompletionTokens: 7,
		Turns: []schema.Turn{
			{ToolName: "search_code_snippets", PolicyLatencyMS: 120, ToolLatencyMS: 3},
			{ToolName: "finish", PolicyLatencyMS: 80},
		}})
	m.ObserveTrajectory(schema.Trajectory{Status: schema.StatusPolicyError})
	m.GroupClosed(5)
	m.IndexReady(300*time.Millisecond, "built", nil)
	m.IndexReady(time.Millisecond, "", errors.New("no such snapshot"))
	m.IndexReady(20*time.Millisecond, "shared", nil)

	var unhealthy atomic.Bool
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, ln, m, func(context.Context) error {
			if unhealthy.Load() {
				return errors.New("not connected")
			}
			return nil
		}, zerolog.Nop())
	}()
	base := "http://" + ln.Addr().String()

	code, body := get(t, base+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	for _, want := range []string{
		`a2farm_episodes_total{status="ok"} 1`,
		`a2farm_episodes_total{status="policy_error"} 1`,
		`a2farm_policy_errors_total 1`,
		`a2farm_tokens_total{kind="prompt"} 100`,
		`a2farm_tokens_total{kind="completion"} 7`,
		`a2farm_tool_seconds_count{tool="search_code_snippets"} 1`,
		`a2farm_turn_seconds_count 2`,
		`a2farm_policy_seconds_sum 0.2`,
		`a2farm_groups_closed_total 1`,
		`a2farm_shard_rows_total 5`,
		`a2farm_index_build_seconds_count{outcome="ok"} 1`,
		`a2farm_index_build_seconds_sum{outcome="ok"} 0.3`,
		`a2farm_index_build_seconds_count{outcome="error"} 1`,
		`a2farm_index_load_seconds_count{from="shared"} 1`,
		`a2farm_queue_pending 2`,
		`a2farm_queue_in_flight 0`,
		`a2farm_learner_backlog 2`,
		`a2farm_learner_archiving 0`,
	} {
		// Whole lines: "... 1" must not pass for "... 10".
		if !slices.Contains(strings.Split(body, "\n"), want) {
			t.Errorf("/metrics lacks the line %q", want)
		}
	}
	if !strings.Contains(body, "\ngo_goroutines ") {
		t.Error("/metrics lacks the Go runtime's metrics")
	}
	if code, _ := get(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz while healthy: %d", code)
	}
	unhealthy.Store(true)
	if code, body := get(t, base+"/healthz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "not connected") {
		t.Errorf("/healthz while unhealthy: %d %q", code, body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
