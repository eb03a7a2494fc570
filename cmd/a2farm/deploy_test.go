package main

import (
	"strings"
	"testing"

	"github.com/a2farm/a2farm/deploy"
)

// TestDeploymentCommandLinesParse parses every a2farm command line of the
// deployment files (compose, Kubernetes) with the real commands.
func TestDeploymentCommandLinesParse(t *testing.T) {
	lines, err := deploy.CommandLines()
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) == 0 {
		t.Fatal("the deployment files run no a2farm command")
	}
	for _, args := range lines {
		if err := CheckArgs(args); err != nil {
			t.Errorf("a2farm %s: %v", strings.Join(args, " "), err)
		}
	}
}
