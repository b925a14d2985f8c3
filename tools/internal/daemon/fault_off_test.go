//go:build !faultinject

package daemon

import (
	"net/http"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// A build without the faultinject tag, which is what make build and make
// package produce, stores on the real file system and serves no fault
// endpoint.
func TestReleaseBuildHasNoFaultHook(t *testing.T) {
	if faultInjection {
		t.Fatal("fault hook compiled into a build without the faultinject tag")
	}
	if storageFS() != vfs.Default {
		t.Fatal("storage file system is wrapped")
	}
	h := &probeHandler{}
	if got := withFaultAPI(h); got != http.Handler(h) {
		t.Fatal("admin handler is wrapped")
	}
}

type probeHandler struct{}

func (*probeHandler) ServeHTTP(http.ResponseWriter, *http.Request) {}
