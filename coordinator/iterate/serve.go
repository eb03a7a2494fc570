package iterate

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/a2farm/a2farm/internal/llm"
)

// AdapterName is the name adapter k of a run is served under: a new name
// per version, never reused (a reused name can serve the old adapter's
// cached prefix blocks).
func AdapterName(run string, k int) string { return fmt.Sprintf("%s-it%d", run, k) }

// Replica is one policy server the driver loads adapters onto.
type Replica struct {
	Name   string // for messages: the URL without credentials
	Client *llm.Client
}

// Deploy loads the adapter at path under name onto every replica and
// confirms it on each: /v1/models lists name, loaded from path, and one
// request with it is answered. It stops at the first replica that fails,
// naming it. A replica that has name loaded already from the same path
// counts as done; from another path is refused (a reused name).
func Deploy(ctx context.Context, replicas []Replica, name, path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	for _, r := range replicas {
		if err := deployOne(ctx, r, name, abs); err != nil {
			return fmt.Errorf("replica %s: %w", r.Name, err)
		}
	}
	return nil
}

func deployOne(ctx context.Context, r Replica, name, path string) error {
	err := r.Client.LoadLoRA(ctx, name, path)
	if err != nil && !errors.Is(err, llm.ErrLoRALoaded) {
		return fmt.Errorf("load adapter %s from %s: %w", name, path, err)
	}
	return Confirm(ctx, r, name, path)
}

// Retire unloads the named adapters from every replica, so that a
// replica keeps only the versions a rollout may still use (vLLM keeps a
// bounded number of adapters and evicts the least recently used one
// silently: a version still acting must never be the one it drops). A
// replica that does not hold a name — it restarted, or never loaded it —
// counts as done. Adapter folders are never deleted: a replica may still
// load from them (a worker loads a forgotten adapter again).
func Retire(ctx context.Context, replicas []Replica, names []string) error {
	for _, r := range replicas {
		for _, name := range names {
			if err := r.Client.UnloadLoRA(ctx, name); err != nil && !errors.Is(err, llm.ErrLoRANotLoaded) {
				return fmt.Errorf("replica %s: unload adapter %s: %w", r.Name, name, err)
			}
		}
	}
	return nil
}

// Confirm checks that r serves name (from path, when path is not empty)
// and answers a request with it.
func Confirm(ctx context.Context, r Replica, name, path string) error {
	models, err := r.Client.Models(ctx)
	if err != nil {
		return fmt.Errorf("list models: %w", err)
	}
	found := false
	for _, m := range models {
		if m.ID != name {
			continue
		}
		found = true
		if path != "" && m.Root != "" && filepath.Clean(m.Root) != filepath.Clean(path) {
			return fmt.Errorf("serves %s from %s, not %s: an adapter name is never reused; remove it from the replica (POST /v1/unload_lora_adapter) or use another run id", name, m.Root, path)
		}
	}
	if !found {
		return fmt.Errorf("the load of %s answered, but /v1/models does not list it (is the path %s readable by the server?)", name, path)
	}
	zero := 0.0
	_, err = r.Client.Chat(ctx, llm.Request{Model: name, MaxTokens: 1, Temperature: &zero,
		Messages: []llm.Message{{Role: "user", Content: "Say OK."}}})
	if err != nil {
		return fmt.Errorf("a request with %s failed: %w", name, err)
	}
	return nil
}
