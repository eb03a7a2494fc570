package policytest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Replica is one replica of a scripted policy server that a test can
// stop and start again on the same address (a server restart: refused
// connections meanwhile), or make refuse every request. It answers GET
// /v1/models as vLLM does, and counts the requests of each episode by
// the header that carries the episode id. With EnableLoRA it also takes
// vLLM's run-time adapter loads (see EnableLoRA).
type Replica struct {
	// URL is the API root, ending in /v1.
	URL string

	scripted ScriptedServer
	header   string
	addr     string
	delay    func() time.Duration
	refuse   atomic.Bool
	requests atomic.Int64

	mu       sync.Mutex
	srv      *http.Server
	episodes map[string]int
	lora     *loraState
}

// LoRA model names and loads, as a vLLM server started with --enable-lora
// keeps them; guarded by Replica.mu.
type loraState struct {
	base     string
	adapters map[string]string // name → path
	loads    []Load
	served   map[string]int // chat requests per model name
	ignore   bool           // answer loads 200 without loading
	refuse   bool           // answer loads 500
}

// Load is one load or unload request a replica received.
type Load struct {
	Op, Name, Path string
}

// NewReplica starts a replica answering after delay; episodeHeader names
// the header whose values it counts. It stops with the test.
func NewReplica(tb testing.TB, delay time.Duration, episodeHeader string) *Replica {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	r := &Replica{header: episodeHeader, addr: ln.Addr().String(), delay: func() time.Duration { return delay },
		episodes: map[string]int{}}
	r.URL = "http://" + r.addr + "/v1"
	r.serve(ln)
	tb.Cleanup(r.Stop)
	return r
}

func (r *Replica) serve(ln net.Listener) {
	chat := r.scripted.handler(r.delay)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodGet {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": r.models()})
			return
		}
		if strings.HasSuffix(req.URL.Path, "_lora_adapter") {
			r.changeAdapters(w, req)
			return
		}
		if !r.serves(w, req) {
			return
		}
		r.requests.Add(1)
		r.mu.Lock()
		r.episodes[req.Header.Get(r.header)]++
		r.mu.Unlock()
		if r.refuse.Load() {
			http.Error(w, `{"error":{"message":"invalid request: unknown field"}}`, http.StatusBadRequest)
			return
		}
		chat.ServeHTTP(w, req)
	})}
	r.mu.Lock()
	r.srv = srv
	r.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
}

// Stop closes the server and every connection to it; it forgets every
// adapter loaded at run time, as a restarted vLLM does.
func (r *Replica) Stop() {
	r.mu.Lock()
	srv := r.srv
	r.srv = nil
	if r.lora != nil {
		clear(r.lora.adapters)
	}
	r.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

// Start serves again on the same address (a restarted server).
func (r *Replica) Start(tb testing.TB) {
	tb.Helper()
	var ln net.Listener
	var err error
	for range 50 { // the port may linger for a moment after Stop
		if ln, err = net.Listen("tcp", r.addr); err == nil {
			r.serve(ln)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	tb.Fatalf("restart replica on %s: %v", r.addr, err)
}

// Refuse makes every chat request answer 400 (on) or be served (off).
func (r *Replica) Refuse(on bool) { r.refuse.Store(on) }

// Requests counts the chat requests received.
func (r *Replica) Requests() int64 { return r.requests.Load() }

// Episodes counts the chat requests received per episode id.
func (r *Replica) Episodes() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.episodes))
	for k, v := range r.episodes {
		out[k] = v
	}
	return out
}

// Finished counts the episodes the replica sent a finish reply for.
func (r *Replica) Finished() int64 {
	_, finished := r.scripted.Episodes()
	return finished
}

// EnableLoRA makes the replica serve base and the adapters loaded at run
// time, as vLLM with --enable-lora does: POST /v1/load_lora_adapter and
// /v1/unload_lora_adapter change them (a reused name is 400, a load of a
// path without adapter_config.json 404), GET /v1/models lists them, and a
// chat request for any other name is answered 404 "The model `x` does not
// exist.".
func (r *Replica) EnableLoRA(base string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lora = &loraState{base: base, adapters: map[string]string{}, served: map[string]int{}}
}

// IgnoreLoads makes loads answer 200 without loading anything, as vLLM
// has answered for a path that does not exist.
func (r *Replica) IgnoreLoads(on bool) { r.withLoRA(func(l *loraState) { l.ignore = on }) }

// RefuseLoads makes every load answer 500 (on) or be served (off).
func (r *Replica) RefuseLoads(on bool) { r.withLoRA(func(l *loraState) { l.refuse = on }) }

// Loads returns the loads and unloads received, in order.
func (r *Replica) Loads() []Load {
	var out []Load
	r.withLoRA(func(l *loraState) { out = slices.Clone(l.loads) })
	return out
}

// Served counts the chat requests answered per model name.
func (r *Replica) Served() map[string]int {
	out := map[string]int{}
	r.withLoRA(func(l *loraState) { maps.Copy(out, l.served) })
	return out
}

func (r *Replica) withLoRA(f func(*loraState)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lora == nil {
		panic("policytest: EnableLoRA first")
	}
	f(r.lora)
}

func (r *Replica) models() []map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lora == nil {
		return []map[string]any{{"id": "scripted", "object": "model"}}
	}
	out := []map[string]any{{"id": r.lora.base, "object": "model", "root": r.lora.base}}
	for _, name := range slices.Sorted(maps.Keys(r.lora.adapters)) {
		out = append(out, map[string]any{"id": name, "object": "model", "root": r.lora.adapters[name], "parent": r.lora.base})
	}
	return out
}

// serves answers 404 for a model the replica does not serve (LoRA mode
// only) and counts the request's model otherwise.
func (r *Replica) serves(w http.ResponseWriter, req *http.Request) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lora == nil {
		return true
	}
	data, _ := io.ReadAll(req.Body)
	req.Body = io.NopCloser(bytes.NewReader(data))
	var body struct {
		Model string `json:"model"`
	}
	_ = json.Unmarshal(data, &body)
	if _, ok := r.lora.adapters[body.Model]; !ok && body.Model != r.lora.base {
		vllmError(w, http.StatusNotFound, "The model `"+body.Model+"` does not exist.")
		return false
	}
	r.lora.served[body.Model]++
	return true
}

func (r *Replica) changeAdapters(w http.ResponseWriter, req *http.Request) {
	var body struct {
		Name string `json:"lora_name"`
		Path string `json:"lora_path"`
	}
	if err := json.NewDecoder(req.Body).Decode(&body); err != nil {
		vllmError(w, http.StatusBadRequest, "bad JSON: "+err.Error())
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.lora
	if l == nil {
		vllmError(w, http.StatusNotFound, "Not Found")
		return
	}
	load := strings.HasSuffix(req.URL.Path, "/load_lora_adapter")
	op := "unload"
	if load {
		op = "load"
	}
	l.loads = append(l.loads, Load{Op: op, Name: body.Name, Path: body.Path})
	_, loaded := l.adapters[body.Name]
	switch {
	case l.refuse:
		vllmError(w, http.StatusInternalServerError, "load failed")
	case load && loaded:
		vllmError(w, http.StatusBadRequest, "The lora adapter '"+body.Name+"' has already been loaded.")
	case load && l.ignore:
		fmt.Fprintf(w, "Success: LoRA adapter '%s' added successfully.", body.Name)
	case load:
		if _, err := os.Stat(filepath.Join(body.Path, "adapter_config.json")); err != nil {
			vllmError(w, http.StatusNotFound, "No adapter found for "+body.Path)
			return
		}
		l.adapters[body.Name] = body.Path
		fmt.Fprintf(w, "Success: LoRA adapter '%s' added successfully.", body.Name)
	case !loaded:
		vllmError(w, http.StatusNotFound, "The lora adapter '"+body.Name+"' cannot be found.")
	default:
		delete(l.adapters, body.Name)
		fmt.Fprintf(w, "Success: LoRA adapter '%s' removed successfully.", body.Name)
	}
}

func vllmError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "code": code}})
}
