// Package statuspage serves the farm's live page: queue depth over the
// last hour, live workers and their load, each run's progress and ETA,
// and the learner's backlog. The page refreshes itself and draws its plots
// as inline SVG; the server is read-only (GET and HEAD only) and binds to
// loopback unless told otherwise.
package statuspage

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/a2farm/a2farm/coordinator"
	"github.com/a2farm/a2farm/internal/bus"
	"github.com/a2farm/a2farm/internal/chart"
)

// StatusFunc reads the farm's state as of now.
type StatusFunc func(ctx context.Context, now time.Time) (*coordinator.FarmStatus, error)

// Config configures a Server.
type Config struct {
	Status StatusFunc
	// Every is how often the state is sampled (default 5s); Window how
	// much history the page shows (default 1h); Refresh how often the page
	// reloads itself (default 10s).
	Every, Window, Refresh time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	Log zerolog.Logger
}

// Sample is the queue and the learner's backlog at one moment.
type Sample struct {
	At          time.Time `json:"at"`
	Pending     uint64    `json:"pending"`
	InFlight    uint64    `json:"in_flight"`
	Redelivered uint64    `json:"redelivered"`
	Backlog     uint64    `json:"learner_backlog"`
}

// Server samples the farm and serves the page.
type Server struct {
	cfg     Config
	mu      sync.Mutex
	history []Sample
	last    *coordinator.FarmStatus
	lastErr error
}

// New returns a server; Run samples, Handler serves.
func New(cfg Config) (*Server, error) {
	if cfg.Status == nil {
		return nil, errors.New("status page: no status source")
	}
	if cfg.Every <= 0 {
		cfg.Every = 5 * time.Second
	}
	if cfg.Window <= 0 {
		cfg.Window = time.Hour
	}
	if cfg.Refresh <= 0 {
		cfg.Refresh = 10 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Server{cfg: cfg}, nil
}

// Run samples the farm every period until ctx ends.
func (s *Server) Run(ctx context.Context) {
	t := time.NewTicker(s.cfg.Every)
	defer t.Stop()
	for {
		s.Sample(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Sample reads the farm's state once and adds it to the history.
func (s *Server) Sample(ctx context.Context) {
	now := s.cfg.Now()
	st, err := s.cfg.Status(ctx, now)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastErr = err
	if err != nil {
		if ctx.Err() == nil {
			s.cfg.Log.Warn().Err(err).Msg("status page: cannot read the farm's state")
		}
		return
	}
	s.last = st
	s.history = append(s.history, Sample{At: st.At, Pending: st.Pending, InFlight: st.InFlight,
		Redelivered: st.Redelivered, Backlog: st.Learner.Backlog})
	cut := 0
	for cut < len(s.history) && now.Sub(s.history[cut].At) > s.cfg.Window {
		cut++
	}
	s.history = append(s.history[:0:0], s.history[cut:]...)
}

// snapshot is what one page shows.
type snapshot struct {
	Status  *coordinator.FarmStatus `json:"status"`
	History []Sample                `json:"history"`
	Error   string                  `json:"error,omitempty"`
}

func (s *Server) snapshot() snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	snap := snapshot{Status: s.last, History: append([]Sample(nil), s.history...)}
	if s.lastErr != nil {
		snap.Error = s.lastErr.Error()
	}
	return snap
}

// Handler serves the page at / and its numbers at /status.json.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.page)
	mux.HandleFunc("GET /status.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s.snapshot())
	})
	return readOnly(mux)
}

// readOnly refuses every method but GET and HEAD.
func readOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "read-only: GET or HEAD only", http.StatusMethodNotAllowed)
			return
		}
		next.ServeHTTP(w, r)
	})
}

//go:embed page.html.tmpl
var pageText string

var page = template.Must(template.New("status").Funcs(template.FuncMap{
	"pct": func(a, b int) string {
		if b == 0 {
			return "-"
		}
		return fmt.Sprintf("%.0f%%", 100*float64(a)/float64(b))
	},
	"ago": func(now, then time.Time) string { return now.Sub(then).Round(time.Second).String() },
	"eta": func(d time.Duration) string {
		if d <= 0 {
			return "-"
		}
		return d.Round(time.Second).String()
	},
	"f1":     func(v float64) string { return fmt.Sprintf("%.1f", v) },
	"silent": func(st *coordinator.FarmStatus, id string) bool { return slices.Contains(st.Silent, id) },
	"hasReplicas": func(workers []bus.Heartbeat) bool {
		return slices.ContainsFunc(workers, func(hb bus.Heartbeat) bool { return len(hb.Replicas) > 0 })
	},
}).Parse(pageText))

// pageView is what the template reads.
type pageView struct {
	snapshot
	Now            time.Time
	RefreshSeconds int
	WindowMinutes  int
	Queue, Load    template.HTML
	Active, Slots  int
}

func (s *Server) page(w http.ResponseWriter, _ *http.Request) {
	v := pageView{snapshot: s.snapshot(), Now: s.cfg.Now().UTC(), RefreshSeconds: int(s.cfg.Refresh.Seconds()),
		WindowMinutes: int(s.cfg.Window.Minutes())}
	var err error
	if v.Queue, err = queuePlot(v.History, v.Now); err == nil && v.Status != nil && len(v.Status.Workers) > 0 {
		v.Load, err = loadPlot(v.Status)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if v.Status != nil {
		for _, hb := range v.Status.Workers {
			v.Active += hb.Active
			v.Slots += hb.Capacity
		}
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := page.Execute(w, v); err != nil {
		s.cfg.Log.Debug().Err(err).Msg("status page: writing the page")
	}
}

// queuePlot draws the queue depth and the learner's backlog over the
// window, in minutes before now.
func queuePlot(history []Sample, now time.Time) (template.HTML, error) {
	if len(history) == 0 {
		return "", nil
	}
	series := []chart.Series{{Name: "pending"}, {Name: "in flight"}, {Name: "redelivered"}, {Name: "learner backlog"}}
	for _, h := range history {
		x := -now.Sub(h.At).Minutes()
		for i, y := range []uint64{h.Pending, h.InFlight, h.Redelivered, h.Backlog} {
			series[i].X = append(series[i].X, x)
			series[i].Y = append(series[i].Y, float64(y))
		}
	}
	return chart.Lines(chart.Frame{Title: "Queue depth", X: "minutes ago", Y: "jobs / trajectories", Width: chart.Wide}, series...)
}

// loadPlot draws each live worker's episodes in flight against its
// capacity.
func loadPlot(st *coordinator.FarmStatus) (template.HTML, error) {
	var ids []string
	active, capacity := chart.BarGroup{Name: "episodes running"}, chart.BarGroup{Name: "capacity"}
	for _, hb := range st.Workers {
		ids = append(ids, hb.ID)
		active.Values = append(active.Values, float64(hb.Active))
		capacity.Values = append(capacity.Values, float64(hb.Capacity))
	}
	return chart.Bars(chart.Frame{Title: "Worker load", Y: "episodes"}, ids, active, capacity)
}

// ListenAddr binds an address without a host to loopback: the page is
// exposed beyond this machine only when the host says so (0.0.0.0:PORT).
func ListenAddr(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("--http %q: want HOST:PORT or :PORT: %w", addr, err)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

// Listen binds addr, on loopback unless it names a host, so that a
// caller can report a bad or busy address before starting anything else.
func Listen(addr string) (net.Listener, error) {
	addr, err := ListenAddr(addr)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("status page: %w", err)
	}
	return ln, nil
}

// URL is the page's address on ln.
func URL(ln net.Listener) string { return "http://" + ln.Addr().String() + "/" }

// Serve samples the farm and serves the page on ln until ctx ends.
func Serve(ctx context.Context, ln net.Listener, cfg Config) error {
	s, err := New(cfg)
	if err != nil {
		ln.Close()
		return err
	}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		s.Run(ctx)
	}()
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
	}()
	err = srv.Serve(ln)
	<-stopped
	<-sampled
	if !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("status page: %w", err)
	}
	return nil
}
