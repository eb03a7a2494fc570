// Package deploy holds the deployment files (NATS cluster, compose,
// Kubernetes, Grafana, Prometheus); its test parses each of them with the
// tool that will read it and checks them against the code: the streams
// and consumer they name, the a2farm command lines they run, the metrics
// their dashboards query.
package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"go.yaml.in/yaml/v3"

	"github.com/a2farm/a2farm/internal/bus"
	"github.com/a2farm/a2farm/internal/cli"
	"github.com/a2farm/a2farm/internal/telemetry"
	"github.com/a2farm/a2farm/schema"
)

func TestNATSClusterConfigs(t *testing.T) {
	t.Setenv("NATS_FARM_PASSWORD", "test")
	names := map[string]bool{}
	for i := 1; i <= 3; i++ {
		path := filepath.Join("nats", "nats-"+string(rune('0'+i))+".conf")
		opts, err := server.ProcessConfigFile(path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if !opts.JetStream || opts.Cluster.Name != "a2farm" || len(opts.Routes) != 3 || opts.Password != "test" {
			t.Errorf("%s: jetstream %v, cluster %q, %d routes, password from env %v", path, opts.JetStream,
				opts.Cluster.Name, len(opts.Routes), opts.Password == "test")
		}
		if limit := int64(bus.DefaultConfig().MaxMsgSize + 64<<10); int64(opts.MaxPayload) < limit {
			t.Errorf("%s: max_payload %d is below a2farm's largest message %d", path, opts.MaxPayload, limit)
		}
		names[opts.ServerName] = true
	}
	if len(names) != 3 {
		t.Errorf("server names are not distinct: %v", names)
	}
}

// yamlDocs decodes every document of a YAML file.
func yamlDocs(t *testing.T, path string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []map[string]any
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		docs = append(docs, doc)
	}
}

// commandLines finds every container command that runs a2farm (a list
// whose first element is one of its subcommands).
func commandLines(v any, out *[][]string) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if l, ok := x.([]any); ok && (k == "command" || k == "args") && len(l) > 0 {
				var args []string
				for _, a := range l {
					args = append(args, a.(string))
				}
				if slices.Contains([]string{"worker", "learner", "coordinator", "nats", "status"}, args[0]) {
					*out = append(*out, args)
				}
				continue
			}
			commandLines(x, out)
		}
	case []any:
		for _, x := range v {
			commandLines(x, out)
		}
	}
}

func TestComposeAndKubernetes(t *testing.T) {
	compose := yamlDocs(t, "compose.yaml")[0]
	services, _ := compose["services"].(map[string]any)
	for _, s := range []string{"nats-1", "nats-2", "nats-3", "vllm", "learner", "worker", "coordinator", "prometheus"} {
		if services[s] == nil {
			t.Errorf("compose.yaml has no %s service", s)
		}
	}
	var lines [][]string
	commandLines(compose, &lines)
	kinds := map[string]bool{}
	for _, f := range []string{"k8s/a2farm.yaml", "k8s/keda.yaml", "k8s/nats-values.yaml", "prometheus/prometheus.yml"} {
		for _, doc := range yamlDocs(t, f) {
			commandLines(doc, &lines)
			if k, ok := doc["kind"].(string); ok {
				kinds[k] = true
			}
		}
	}
	for _, k := range []string{"Deployment", "StatefulSet", "Job", "ConfigMap", "ScaledObject"} {
		if !kinds[k] {
			t.Errorf("no %s among the Kubernetes manifests", k)
		}
	}
	if len(lines) < 6 {
		t.Errorf("found %d a2farm command lines, want the worker, learner and coordinator of compose and k8s", len(lines))
	}
	for _, args := range lines {
		if err := cli.CheckArgs(args); err != nil {
			t.Errorf("a2farm %s: %v", strings.Join(args, " "), err)
		}
	}
}

func TestKEDAScalesOnTheJobsConsumer(t *testing.T) {
	doc := yamlDocs(t, "k8s/keda.yaml")[0]
	spec := doc["spec"].(map[string]any)
	trig := spec["triggers"].([]any)[0].(map[string]any)
	md := trig["metadata"].(map[string]any)
	if trig["type"] != "nats-jetstream" || md["stream"] != bus.JobsStream || md["consumer"] != bus.WorkersConsumer {
		t.Errorf("KEDA trigger %v does not watch %s/%s", trig, bus.JobsStream, bus.WorkersConsumer)
	}
}

func TestGrafanaQueriesExistingMetrics(t *testing.T) {
	data, err := os.ReadFile("grafana/a2farm.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatal(err)
	}
	m := telemetry.New()
	m.WatchQueue(func(context.Context) (uint64, uint64, error) { return 0, 0, errors.New("no server here") })
	m.WatchLearner(func(context.Context) (uint64, uint64, error) { return 0, 0, errors.New("no server here") })
	// Labelled families appear once observed.
	m.ObserveTrajectory(schema.Trajectory{Status: schema.StatusOK, Turns: []schema.Turn{{ToolName: "finish"}}})
	m.IndexReady(time.Second, "built", nil)
	m.IndexReady(time.Second, "shared", nil)
	families, err := m.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, f := range families {
		known[f.GetName()] = true
	}
	name := regexp.MustCompile(`a2farm_[a-z_]+`)
	queries := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, n := range name.FindAllString(tg.Expr, -1) {
				queries++
				base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_sum"), "_count")
				if !known[base] {
					t.Errorf("panel %q queries %s, which a2farm does not export", p.Title, n)
				}
			}
		}
	}
	if queries < len(dash.Panels) {
		t.Errorf("only %d metric references in %d panels", queries, len(dash.Panels))
	}
}
