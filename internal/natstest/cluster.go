package natstest

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Cluster is a JetStream cluster of real servers on loopback, started
// from the project's own server configuration files with their ports,
// host names and store folders rewritten, so that the deployed
// configuration is exercised, not only parsed.
type Cluster struct {
	t       testing.TB
	confs   []string // rewritten configuration files
	Servers []*server.Server
}

var (
	listenLine  = regexp.MustCompile(`(?m)^listen:.*$`)
	httpLine    = regexp.MustCompile(`(?m)^http:.*$`)
	storeLine   = regexp.MustCompile(`(?m)^(\s*)store_dir:.*$`)
	clusterPort = regexp.MustCompile(`(?m)^(\s*)listen: 0\.0\.0\.0:6222`)
	routeLine   = regexp.MustCompile(`nats-route://nats-(\d):6222`)
)

// StartCluster starts one server per configuration file (deploy/nats's
// nats-N.conf); the environment must hold what the files reference (the
// password).
func StartCluster(t testing.TB, confs ...string) *Cluster {
	t.Helper()
	ports := make([]int, len(confs))
	routes := make([]int, len(confs))
	for i := range confs {
		ports[i], routes[i] = FreePort(t), FreePort(t)
	}
	c := &Cluster{t: t}
	dir := t.TempDir()
	for i, path := range confs {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		s := string(data)
		s = listenLine.ReplaceAllString(s, fmt.Sprintf("listen: 127.0.0.1:%d", ports[i]))
		s = httpLine.ReplaceAllString(s, "")
		s = storeLine.ReplaceAllString(s, fmt.Sprintf("${1}store_dir: %q", filepath.Join(dir, fmt.Sprint(i))))
		s = clusterPort.ReplaceAllString(s, fmt.Sprintf("${1}listen: 127.0.0.1:%d", routes[i]))
		s = routeLine.ReplaceAllStringFunc(s, func(m string) string {
			var n int
			fmt.Sscanf(routeLine.FindStringSubmatch(m)[1], "%d", &n)
			return fmt.Sprintf("nats-route://127.0.0.1:%d", routes[n-1])
		})
		out := filepath.Join(dir, filepath.Base(path))
		if err := os.WriteFile(out, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		c.confs = append(c.confs, out)
		c.Servers = append(c.Servers, nil)
	}
	for i := range c.confs {
		c.Start(i)
	}
	for _, s := range c.Servers {
		if !s.ReadyForConnections(20 * time.Second) {
			t.Fatal("a cluster node did not start")
		}
	}
	t.Cleanup(func() {
		for _, s := range c.Servers {
			if s != nil {
				s.Shutdown()
				s.WaitForShutdown()
			}
		}
	})
	return c
}

// Start starts (or restarts, on its store) node i.
func (c *Cluster) Start(i int) {
	c.t.Helper()
	opts, err := server.ProcessConfigFile(c.confs[i])
	if err != nil {
		c.t.Fatal(err)
	}
	opts.NoLog, opts.NoSigs = true, true
	s, err := server.NewServer(opts)
	if err != nil {
		c.t.Fatal(err)
	}
	go s.Start()
	c.Servers[i] = s
}

// Kill stops node i at once.
func (c *Cluster) Kill(i int) {
	c.Servers[i].Shutdown()
	c.Servers[i].WaitForShutdown()
}

// URLs are the client URLs of every node, comma-separated.
func (c *Cluster) URLs() string {
	var urls []string
	for _, s := range c.Servers {
		urls = append(urls, s.ClientURL())
	}
	return strings.Join(urls, ",")
}

// Connect is a client of every node as the farm's user (deploy/nats's
// files: farm, the password in NATS_FARM_PASSWORD), reconnecting for ever
// to whichever node is up; it closes with the test.
func (c *Cluster) Connect() (*nats.Conn, jetstream.JetStream) {
	c.t.Helper()
	nc, err := nats.Connect(c.URLs(), nats.UserInfo("farm", os.Getenv("NATS_FARM_PASSWORD")), nats.MaxReconnects(-1),
		nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		c.t.Fatal(err)
	}
	return nc, js
}

// StreamLeader is the node leading a stream of the global account.
func (c *Cluster) StreamLeader(stream string) int {
	for i, s := range c.Servers {
		if s != nil && s.Running() && s.JetStreamIsStreamLeader(server.DEFAULT_GLOBAL_ACCOUNT, stream) {
			return i
		}
	}
	return -1
}

// FreePort is a loopback TCP port free at the time of the call.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
