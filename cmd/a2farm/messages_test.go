package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/a2farm/a2farm/internal/sample"
)

// TestDatasetWarnings: each skipped dataset row is one warning that says
// what is wrong with it in words — its line, the column where a line stops
// being JSON, the instance where the row names one (and no empty
// instance= where it does not) — and the command ends with the counts of
// rows read and skipped. Before, a garbage first line read "invalid JSON at
// column 2 instance= line=1", and "gold 1/1 (100%)" was all a file of two
// rows said of them.
func TestDatasetWarnings(t *testing.T) {
	l, err := sample.Write(filepath.Join(t.TempDir(), "sample"))
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(l.Dataset)
	if err != nil {
		t.Fatal(err)
	}
	good := strings.SplitN(string(data), "\n", 2)[0]
	tests := []struct {
		name  string
		lines []string
		warn  []string // lines of stderr, in order
		count string   // stdout's last line starts so
	}{
		{"a garbage line", []string{"garbage here", good},
			[]string{`WRN skipping row: not a JSON object: the line starts with "garbage here" line=1`},
			"2 dataset rows read, 1 skipped (the warnings say why); gold for 1 of 1 instances (0 null)"},
		{"JSON that stops", []string{good, `{"instance_id": "x__y-1", "repo": nul}`},
			[]string{"WRN skipping row: invalid JSON at column 38, near `\"repo\": nul}` line=2"}, // the character where it stopped
			"2 dataset rows read, 1 skipped"},
		{"a row without a field", []string{good, "", `{"instance_id": "x__y-1", "repo": "x/y"}`},
			[]string{`WRN skipping row: missing field "base_commit" instance=x__y-1 line=3`},
			"2 dataset rows read, 1 skipped"},
		{"a language a2farm does not read", []string{strings.Replace(good, `"instance_id"`, `"repo_language": "rust", "instance_id"`, 1), good},
			[]string{`WRN skipping row: the row's language "rust" is not one a2farm reads (python, go, typescript, java); --languages reads others instance=acme__inventory-1 line=1`},
			"2 dataset rows read, 1 skipped"},
		{"every row good", []string{good}, nil, "1 dataset rows read; gold for 1 of 1 instances (0 null)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "dataset.jsonl")
			if err := os.WriteFile(path, []byte(strings.Join(tt.lines, "\n")+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			code, stdout, stderr := run(t, "gold", "--dataset", path, "--repos", l.ReposDir, "-q")
			if code != 0 {
				t.Fatalf("exit %d\n%s", code, stderr)
			}
			var warnings []string
			for line := range strings.SplitSeq(stderr, "\n") {
				if _, w, ok := strings.Cut(line, " WRN "); ok {
					warnings = append(warnings, "WRN "+w)
				}
			}
			if strings.Join(warnings, "\n") != strings.Join(tt.warn, "\n") {
				t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(warnings, "\n"), strings.Join(tt.warn, "\n"))
			}
			if !strings.Contains(stderr, "INF dataset read") || strings.Contains(stderr, "instance= ") {
				t.Errorf("stderr:\n%s", stderr)
			}
			lines := strings.Split(strings.TrimSpace(stdout), "\n")
			if last := lines[len(lines)-1]; !strings.HasPrefix(last, tt.count) {
				t.Errorf("last line %q; want it to start %q", last, tt.count)
			}
		})
	}
}
