// Package browsertest runs a headless Chromium for tests that drive the
// dashboard, in process or against a real fibrild.
package browsertest

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// ChromiumPath is Debian's chromium package's binary.
const ChromiumPath = "/usr/bin/chromium"

// Browser is a headless Chromium the test started, with one tab.
type Browser struct {
	Ctx       context.Context // the tab's context; ends with the test's deadline
	artifacts string          // where screenshots go

	mu         sync.Mutex
	exceptions []string // uncaught exceptions of the page
}

// Start starts headless Chromium with a fresh profile and opens a tab
// of width x height. Without /usr/bin/chromium it fails when CI=true and
// skips otherwise. Everything stops when the test ends.
func Start(t testing.TB, width, height int) *Browser {
	t.Helper()
	if _, err := os.Stat(ChromiumPath); err != nil {
		msg := ChromiumPath + " not found: browser tests need Debian's chromium package (apt-get install -y chromium; .ci/run installs it)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	profile := t.TempDir() // removed after the browser has exited (cleanups run last-in first-out)
	deadline, cancelDeadline := context.WithTimeout(context.Background(), 2*time.Minute)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(deadline,
		chromedp.ExecPath(ChromiumPath),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(width, height),
	)
	ctx, cancelTab := chromedp.NewContext(allocCtx, chromedp.WithErrorf(t.Logf))
	b := &Browser{Ctx: ctx, artifacts: os.Getenv("FIBRIL_ARTIFACTS")}
	if b.artifacts == "" {
		b.artifacts = t.TempDir()
	}
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(int64(width), int64(height))); err != nil {
		cancelTab()
		cancelAlloc()
		cancelDeadline()
		t.Fatalf("start chromium: %v", err)
	}
	console := chromedp.Console(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for m, err := range console {
			if err != nil {
				return
			}
			if m.IsException() {
				b.mu.Lock()
				b.exceptions = append(b.exceptions, m.Text)
				b.mu.Unlock()
			}
			if m.Type != chromedp.ConsoleDebug {
				t.Logf("browser console: %s", m)
			}
		}
	})
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc() // waits for the browser process to exit
		cancelDeadline()
		wg.Wait()
	})
	return b
}

// Do runs actions in the tab, failing the test on an error.
func (b *Browser) Do(t testing.TB, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.Ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		seen, _ := chromedp.Run(b.Ctx, chromedp.Evaluate[string](`location.href + '\n' + document.body.innerText`))
		t.Fatalf("%s: %v; the page shows:\n%s", what, err, seen)
	}
}

// Text returns the text of the first element sel matches, waiting for it
// to be visible.
func (b *Browser) Text(t testing.TB, sel string) string {
	t.Helper()
	b.Do(t, "wait for "+sel, chromedp.WaitVisible(chromedp.CSS(sel)))
	// Read in one evaluation: the page re-renders as it polls, so a node
	// looked up first and read after may be gone by then.
	s, err := chromedp.Run(b.Ctx, chromedp.Evaluate[string](`(() => { const e = document.querySelector(`+
		strconv.Quote(sel)+`); return e ? e.innerText : ''; })()`))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return strings.TrimSpace(s)
}

// Click clicks the first element sel matches once it is visible, looking
// it up and clicking it in one evaluation in the page: the page re-renders
// as it polls, so a node looked up first and clicked after may be gone by
// then (chromedp.Click's "Could not find node with given id"). Between
// re-renders the lookup finds no node and is tried again.
func Click(sel string) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		if _, err := chromedp.WaitVisible(chromedp.CSS(sel))(ctx, t); err != nil {
			return chromedp.Void{}, err
		}
		_, err := chromedp.Poll[bool](`(() => { const e = document.querySelector(`+strconv.Quote(sel)+
			`); if (!e) return false; e.click(); return true; })()`,
			chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(30*time.Second))(ctx, t)
		return chromedp.Void{}, err
	}
}

// WaitFor polls the page until the JavaScript expression cond is true, or
// fails the test after 30 seconds saying what it waited for and what the
// page showed (the expression show).
func (b *Browser) WaitFor(t testing.TB, what, cond, show string) {
	t.Helper()
	_, err := chromedp.Run(b.Ctx, chromedp.Poll[bool](cond,
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(30*time.Second)))
	if err != nil {
		seen, _ := chromedp.Run(b.Ctx, chromedp.Evaluate[string](show))
		t.Fatalf("wait for %s: %v; the page shows %q", what, err, seen)
	}
}

// Screenshot saves a PNG of the whole page to the artifacts directory:
// $FIBRIL_ARTIFACTS, or a temporary directory of the test.
func (b *Browser) Screenshot(t testing.TB, name string) string {
	t.Helper()
	png, err := chromedp.Run(b.Ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if err := os.MkdirAll(b.artifacts, 0o755); err != nil {
		t.Fatalf("artifacts directory: %v", err)
	}
	path := filepath.Join(b.artifacts, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatalf("save screenshot: %v", err)
	}
	t.Logf("screenshot: %s", path)
	return path
}

// CheckNoExceptions fails the test if the page threw.
func (b *Browser) CheckNoExceptions(t testing.TB) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.exceptions {
		t.Errorf("page threw: %s", e)
	}
}
