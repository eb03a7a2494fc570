package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestNatsClusterFlagsAreChecked(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--routes", "nats-route://127.0.0.1:1"}, "--routes needs --cluster"},
		{[]string{"--cluster", "127.0.0.1:6222", "--routes", "nats-route://127.0.0.1:6222"}, "--cluster needs --name"},
		{[]string{"--cluster", "127.0.0.1", "--name", "n1", "--routes", "nats-route://127.0.0.1:6222"}, "want HOST:PORT"},
		{[]string{"--cluster", "127.0.0.1:6222", "--name", "n1"}, "--cluster needs --routes"},
	} {
		code, _, errOut := run(t, append([]string{"nats", "--store", t.TempDir(), "--port", "-1"}, tc.args...)...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("nats %v: exit %d, %q; want exit %d saying %q", tc.args, code, errOut, exitUsage, tc.want)
		}
	}
}

// TestANatsClusterOfThreeProcesses starts three `a2farm nats` nodes at
// once: the JetStream leader creates the topology with three replicas,
// the others wait for it, and all serve. A node killed with SIGKILL and
// started again on its store rejoins and serves again.
func TestANatsClusterOfThreeProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	bin := buildBinary(t)
	c := startNatsCluster(t, bin, "--ack-wait", "5s")
	for _, n := range c.nodes {
		n.waitWithin(t, "nats listening on", 60*time.Second)
	}
	status := func() string {
		out, err := exec.Command(bin, "status", "--nats", c.url(), "--json").CombinedOutput()
		if err != nil {
			t.Fatalf("status on the cluster: %v\n%s", err, out)
		}
		return string(out)
	}
	status()
	out, err := exec.Command(bin, "farm", "init", "--nats", c.url(), "--replicas", "3", "--ack-wait", "5s").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "farm topology unchanged") || !strings.Contains(string(out), "replicas 3") {
		t.Fatalf("farm init on the cluster: %v\n%s", err, out)
	}
	c.kill(1)
	c.start(t, 1).waitWithin(t, "nats listening on", 60*time.Second)
	status()
}

// natsCluster is three `a2farm nats` processes on loopback.
type natsCluster struct {
	bin         string
	ports       []int
	routes      string
	stores      []string
	extra       []string
	nodes       []*proc
	clusterPort []int
}

func startNatsCluster(t testing.TB, bin string, extra ...string) *natsCluster {
	dir := t.TempDir()
	c := &natsCluster{bin: bin, extra: extra}
	var routes []string
	for i := range 3 {
		c.ports = append(c.ports, freePort(t))
		c.clusterPort = append(c.clusterPort, freePort(t))
		c.stores = append(c.stores, filepath.Join(dir, fmt.Sprint("n", i)))
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", c.clusterPort[i]))
	}
	c.routes = strings.Join(routes, ",")
	c.nodes = make([]*proc, 3)
	for i := range 3 {
		c.start(t, i)
	}
	return c
}

// start starts (or restarts, on its store) node i.
func (c *natsCluster) start(t testing.TB, i int) *proc {
	args := append([]string{"nats", "--name", fmt.Sprint("n", i), "--port", fmt.Sprint(c.ports[i]), "--store", c.stores[i],
		"--cluster", fmt.Sprintf("127.0.0.1:%d", c.clusterPort[i]), "--routes", c.routes, "--replicas", "3"}, c.extra...)
	c.nodes[i] = start(t, c.bin, nil, args...)
	return c.nodes[i]
}

// kill stops node i with SIGKILL.
func (c *natsCluster) kill(i int) {
	c.nodes[i].cmd.Process.Signal(syscall.SIGKILL)
	c.nodes[i].cmd.Wait()
}

// url names every node, as clients are given a cluster.
func (c *natsCluster) url() string {
	var urls []string
	for _, p := range c.ports {
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	return strings.Join(urls, ",")
}
