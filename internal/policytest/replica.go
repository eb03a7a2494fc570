package policytest

import (
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Replica is one replica of a scripted policy server that a test can
// stop and start again on the same address (a server restart: refused
// connections meanwhile), or make refuse every request. It answers GET
// /v1/models as vLLM does, and counts the requests of each episode by
// the header that carries the episode id.
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
			_, _ = w.Write([]byte(`{"object":"list","data":[{"id":"scripted","object":"model"}]}`))
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

// Stop closes the server and every connection to it.
func (r *Replica) Stop() {
	r.mu.Lock()
	srv := r.srv
	r.srv = nil
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
