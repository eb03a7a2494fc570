// Package deploy holds the deployment files (NATS cluster, compose,
// Kubernetes, Grafana, Prometheus); its test parses each of them with the
// tool that will read it and checks them against the code: the streams
// and consumer they name, the metrics their dashboards query. The a2farm
// command lines they run are listed by CommandLines, which the commands'
// own tests parse; the trainer's (accelerate launch … -m a2farm_trainer)
// are parsed by the trainer's tests (trainer/tests/test_deploy.py).
package deploy

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"slices"

	"go.yaml.in/yaml/v3"
)

//go:embed compose.yaml k8s prometheus
var files embed.FS

// manifests are the files that may run a2farm, compose first.
var manifests = []string{"compose.yaml", "k8s/a2farm.yaml", "k8s/keda.yaml", "k8s/nats-values.yaml", "k8s/trainer.yaml", "prometheus/prometheus.yml"}

// CommandLines returns the arguments of every container command in the
// deployment files that runs a2farm: a command or args list whose first
// element is one of its subcommands.
func CommandLines() ([][]string, error) {
	var lines [][]string
	for _, name := range manifests {
		data, err := files.ReadFile(name)
		if err != nil {
			return nil, err
		}
		docs, err := decodeYAML(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		for _, doc := range docs {
			commandLines(doc, &lines)
		}
	}
	return lines, nil
}

// decodeYAML decodes every document of a YAML file.
func decodeYAML(data []byte) ([]map[string]any, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []map[string]any
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		docs = append(docs, doc)
	}
}

// commandLines appends the a2farm command lines found in v.
func commandLines(v any, out *[][]string) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if l, ok := x.([]any); ok && (k == "command" || k == "args") && len(l) > 0 {
				args := make([]string, 0, len(l))
				for _, a := range l {
					s, _ := a.(string)
					args = append(args, s)
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
