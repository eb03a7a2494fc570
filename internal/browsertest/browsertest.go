// Package browsertest opens pages in a real headless browser (Chromium)
// and reports what the browser saw: how many plots it laid out with a
// visible size, which did not draw, and every script error. Tests that
// use it skip, saying why, where no Chromium is installed. It is imported
// by tests only.
package browsertest

import (
	"context"
	"encoding/json"
	"errors"
	"html"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/a2farm/a2farm/internal/needs"
)

// Seen is what the browser reports of a page once it has loaded.
type Seen struct {
	// Title is the document title.
	Title string `json:"title"`
	// Plots counts the inline SVG plots inside <figure> elements; Drawn
	// those laid out at least 100×50 pixels with some marks in them.
	Plots int `json:"plots"`
	Drawn int `json:"drawn"`
	// Undrawn holds the ids of the figures whose plot did not draw.
	Undrawn []string `json:"undrawn"`
	// Errors are script errors and failed resource loads.
	Errors []string `json:"errors"`
	// Text is the page's visible text.
	Text string `json:"text"`
}

// checker runs first in the page: it records errors, and after load
// writes what it measured into a <pre id="browsertest"> element that the
// DOM dump carries out.
const checker = `<script>
window.__bt = [];
window.addEventListener('error', function (e) {
  window.__bt.push(e.message || ('failed to load ' + ((e.target && (e.target.src || e.target.href)) || 'a resource')));
}, true);
window.addEventListener('load', function () {
  var figs = Array.prototype.slice.call(document.querySelectorAll('figure'));
  var plots = 0, drawn = 0, undrawn = [];
  figs.forEach(function (f) {
    var svg = f.querySelector('svg');
    if (!svg) { return; }
    plots++;
    var r = svg.getBoundingClientRect();
    if (r.width >= 100 && r.height >= 50 && svg.querySelectorAll('path, text').length > 3) { drawn++; } else { undrawn.push(f.id); }
  });
  var out = document.createElement('pre');
  out.id = 'browsertest';
  out.textContent = JSON.stringify({title: document.title, plots: plots, drawn: drawn, undrawn: undrawn,
    errors: window.__bt, text: document.body.innerText});
  document.body.appendChild(out);
});
</script>`

// Browser finds Chromium, or skips the test saying so (needs.Missing).
func Browser(t testing.TB) string {
	t.Helper()
	return needs.Program(t, "a headless browser (chromium)", "apt-get install chromium (.ci/run does)",
		"chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
}

// Open loads the HTML page in Chromium with the checker injected first in
// its head, and returns what the browser saw. Pages that load others (a
// refresh) are measured at their first load.
func Open(t testing.TB, page []byte) Seen {
	t.Helper()
	browser := Browser(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "page.html")
	if err := os.WriteFile(path, inject(page), 0o644); err != nil {
		t.Fatal(err)
	}
	out := run(t, browser, dir, "--dump-dom", "file://"+path)
	m := regexp.MustCompile(`(?s)<pre id="browsertest">(.*?)</pre>`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("the browser never finished loading the page (no measurements in its DOM):\n%.2000s", out)
	}
	var seen Seen
	if err := json.Unmarshal([]byte(html.UnescapeString(string(m[1]))), &seen); err != nil {
		t.Fatalf("browser measurements: %v", err)
	}
	return seen
}

// Screenshot writes a PNG of the page, width × height pixels, to path.
func Screenshot(t testing.TB, page []byte, path string, width, height int) {
	t.Helper()
	browser := Browser(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "page.html")
	if err := os.WriteFile(src, page, 0o644); err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	run(t, browser, dir, "--hide-scrollbars", "--screenshot="+abs,
		"--window-size="+strconv.Itoa(width)+","+strconv.Itoa(height), "file://"+src)
	if info, err := os.Stat(abs); err != nil || info.Size() == 0 {
		t.Fatalf("no screenshot written to %s: %v", abs, err)
	}
}

func run(t testing.TB, browser, dir string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// A profile of its own per run, no sandbox (CI runs as root), no GPU,
	// and a virtual-time budget so that load handlers finish before the
	// DOM is dumped.
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
		"--user-data-dir=" + filepath.Join(dir, "profile"), "--virtual-time-budget=5000"}
	cmd := exec.CommandContext(ctx, browser, append(base, args...)...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) || ctx.Err() != nil {
			t.Fatalf("%s: %v\n%.3000s", browser, err, stderr.String())
		}
		t.Fatal(err)
	}
	return []byte(stdout.String())
}

// inject puts the checker first in the page's head.
func inject(page []byte) []byte {
	s := string(page)
	if i := strings.Index(s, "<head>"); i >= 0 {
		i += len("<head>")
		return []byte(s[:i] + checker + s[i:])
	}
	return []byte(checker + s)
}
