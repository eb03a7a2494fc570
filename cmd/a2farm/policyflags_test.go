package main

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/a2farm/a2farm/coordinator"
	"github.com/a2farm/a2farm/internal/bus"
)

// TestRepeatedServersAreReplicas: a repeated --base-url, or --endpoint
// with the same model again, adds a replica (it used to keep the last
// one); a bad routing or outage budget is a usage error.
func TestRepeatedServersAreReplicas(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		want  []string // replicas as model=url
		usage bool
	}{
		{name: "two base URLs", args: []string{"--base-url", "http://gpu-1:8000/v1", "--base-url", "http://gpu-2:8000/v1"},
			want: []string{"*=http://gpu-1:8000/v1", "*=http://gpu-2:8000/v1"}},
		{name: "one model twice", args: []string{"--endpoint", "qwen=http://gpu-1:8000/v1", "--endpoint", "qwen=http://gpu-2:8000/v1",
			"--endpoint", "other=http://gpu-3:8000/v1"},
			want: []string{"other=http://gpu-3:8000/v1", "qwen=http://gpu-1:8000/v1", "qwen=http://gpu-2:8000/v1"}},
		{name: "the same URL twice", args: []string{"--base-url", "http://gpu-1:8000/v1", "--base-url", "http://gpu-1:8000/v1"}, usage: true},
		{name: "unknown routing", args: []string{"--base-url", "http://gpu-1:8000/v1", "--policy-routing", "random"}, usage: true},
		{name: "no outage budget", args: []string{"--policy-outage-budget", "0s"}, usage: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("A2FARM_BASE_URL", "")
			cmd := &cobra.Command{Use: "x"}
			var f endpointFlags
			f.bind(cmd)
			if err := cmd.ParseFlags(tc.args); err != nil {
				t.Fatal(err)
			}
			reg, err := f.registry()
			var usage *usageError
			if tc.usage {
				if !errors.As(err, &usage) {
					t.Errorf("error %v, want a usage error", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range reg.Replicas() {
				got = append(got, r.Model+"="+r.URL)
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("replicas %v, want %v", got, tc.want)
			}
		})
	}
}

// TestStatusShowsReplicas: status lists each worker's policy servers with
// their episodes, requests, errors and health.
func TestStatusShowsReplicas(t *testing.T) {
	st := &coordinator.FarmStatus{At: time.Now(), Workers: []bus.Heartbeat{{ID: "w-1", Host: "h", Capacity: 4, Updated: time.Now(),
		Replicas: []bus.ReplicaLoad{{Model: "qwen", URL: "http://gpu-1:8000/v1", InFlight: 3, Requests: 120, Errors: 2, Healthy: true},
			{Model: "qwen", URL: "http://gpu-2:8000/v1", Requests: 7, Errors: 7}}}}}
	var out strings.Builder
	printStatus(&out, st)
	var lines []string
	for _, l := range strings.Split(out.String(), "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	for _, want := range []string{"REPLICA MODEL WORKER EPISODES REQUESTS ERRORS HEALTH", "http://gpu-1:8000/v1 qwen w-1 3 120 2 ok",
		"http://gpu-2:8000/v1 qwen w-1 0 7 7 failing (backing off)"} {
		if !slices.Contains(lines, want) {
			t.Errorf("status lacks the line %q:\n%s", want, out.String())
		}
	}
}
