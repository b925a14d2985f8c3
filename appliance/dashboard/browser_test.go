package dashboard

import (
	"strconv"
	"testing"

	"github.com/fibril-edge/fibril/internal/browsertest"
)

type browser = browsertest.Browser

// click clicks an element of a page that re-renders as it polls.
var click = browsertest.Click

func startBrowser(t *testing.T, width, height int) *browser {
	return browsertest.Start(t, width, height)
}

// number is a JavaScript expression: the figure in the first element sel
// matches, as a number (NaN if absent or not a number).
func number(sel string) string {
	return `(() => { const e = document.querySelector(` + strconv.Quote(sel) + `); return e ? Number(e.textContent.replace(/,/g, '')) : NaN; })()`
}

// textOf is a JavaScript expression: the text of the first element sel
// matches, or "(absent)".
func textOf(sel string) string {
	return `(() => { const e = document.querySelector(` + strconv.Quote(sel) + `); return e ? e.textContent.trim() : '(absent)'; })()`
}
