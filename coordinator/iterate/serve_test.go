package iterate

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/a2farm/a2farm/internal/llm"
	"github.com/a2farm/a2farm/internal/policytest"
)

// TestRetireUnloadsWhatAReplicaHolds: a loaded version is unloaded; one a
// replica does not hold (never loaded, or forgotten in a restart) counts as
// done; a replica that fails the unload is named. The folder stays.
func TestRetireUnloadsWhatAReplicaHolds(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "it0")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "adapter_config.json"), []byte(`{"r": 16}`), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rep := policytest.NewReplica(t, 0, "")
	rep.EnableLoRA("base")
	c, err := llm.New(llm.Config{BaseURL: rep.URL, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	replicas := []Replica{{Name: "r1", Client: c}}
	if err := Deploy(ctx, replicas, "run-it0", dir); err != nil {
		t.Fatal(err)
	}
	if err := Retire(ctx, replicas, []string{"run-it0", "never-loaded"}); err != nil {
		t.Fatalf("retire: %v", err)
	}
	want := []policytest.Load{{Op: "load", Name: "run-it0", Path: dir}, {Op: "unload", Name: "run-it0"}, {Op: "unload", Name: "never-loaded"}}
	if got := rep.Loads(); !slices.Equal(got, want) {
		t.Errorf("replica received %v, want %v", got, want)
	}
	models, err := c.Models(ctx)
	if err != nil || slices.ContainsFunc(models, func(m llm.ServedModel) bool { return m.ID == "run-it0" }) {
		t.Errorf("after retiring, the replica lists %v (%v)", models, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "adapter_config.json")); err != nil {
		t.Errorf("the adapter's folder: %v", err)
	}
	rep.RefuseLoads(true)
	if err := Retire(ctx, replicas, []string{"run-it1"}); err == nil || !strings.Contains(err.Error(), "replica r1: unload adapter run-it1") {
		t.Errorf("a failing unload: %v, want an error naming the replica and the adapter", err)
	}
}
