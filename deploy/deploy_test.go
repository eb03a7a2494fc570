package deploy

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/a2farm/a2farm/internal/bus"
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
	docs, err := decodeYAML(data)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return docs
}

func TestComposeAndKubernetes(t *testing.T) {
	compose := yamlDocs(t, "compose.yaml")[0]
	services, _ := compose["services"].(map[string]any)
	for _, s := range []string{"nats-1", "nats-2", "nats-3", "vllm", "learner", "worker", "coordinator", "trainer", "prometheus"} {
		if services[s] == nil {
			t.Errorf("compose.yaml has no %s service", s)
		}
	}
	kinds := map[string]bool{}
	for _, f := range manifests[1:] {
		for _, doc := range yamlDocs(t, f) {
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
	lines, err := CommandLines()
	if err != nil {
		t.Fatal(err)
	}
	// cmd/a2farm's TestDeploymentCommandLinesParse parses each of them.
	if len(lines) < 6 {
		t.Errorf("found %d a2farm command lines, want the worker, learner and coordinator of compose and k8s", len(lines))
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
