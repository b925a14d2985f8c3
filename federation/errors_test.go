package federation

import (
	"errors"
	"fmt"
	"testing"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/appliance/admin"
	"github.com/fibril-edge/fibril/appliance/client"
	"github.com/fibril-edge/fibril/appliance/server"
	"github.com/fibril-edge/fibril/appliance/wire"
)

// TestErrorCodesAgreeOnEveryInterface holds the wire server, the admin API
// and forwarding through a non-owner to the one error catalog: every
// sentinel, alone, wrapped, and wrapped together with every other, gets
// one class, named the same way on every interface, and an error
// forwarded from an owner comes back with the code it left with.
func TestErrorCodesAgreeOnEveryInterface(t *testing.T) {
	var errs []error
	for _, c := range appliance.Catalog {
		errs = append(errs, c.Err, fmt.Errorf("queue q: %w", c.Err))
		for _, d := range appliance.Catalog {
			errs = append(errs, fmt.Errorf("%w: %w", c.Err, d.Err))
		}
	}
	errs = append(errs, errors.New("disk on fire"), &appliance.StaleTagsError{Tags: []uint64{7}})
	for _, err := range errs {
		class := appliance.ClassOf(err)
		if got := server.CodeOf(err); got != class.Wire {
			t.Errorf("%v: wire %s, class %s wants %s", err, got, class.Code, class.Wire)
		}
		status, code, _ := admin.StatusOf(err)
		if status != class.Status || code != class.Code {
			t.Errorf("%v: HTTP %d %s, class wants %d %s", err, status, code, class.Status, class.Code)
		}
		// What the owner answered reaches the non-owner's client as a wire
		// error; the non-owner's server must send the same code on.
		forwarded := brokerError(&client.Error{Code: class.Wire, Message: err.Error()})
		if got := server.CodeOf(forwarded); got != class.Wire {
			t.Errorf("%v forwarded: wire %s, want %s", err, got, class.Wire)
		}
	}
	// The most general condition wins: a queue that failed to open for a
	// bad declaration is unavailable on every interface.
	failed := fmt.Errorf("%w: queue q failed to open: %w", appliance.ErrUnavailable, appliance.ErrInvalid)
	if code := server.CodeOf(failed); code != wire.CodeUnavailable {
		t.Errorf("failed queue: wire %s", code)
	}
	if status, code, _ := admin.StatusOf(failed); status != 503 || code != "unavailable" {
		t.Errorf("failed queue: HTTP %d %s", status, code)
	}
	// A lost connection to the owner, with no code, is unavailable.
	if got := server.CodeOf(brokerError(client.ErrConnectionLost)); got != wire.CodeUnavailable {
		t.Errorf("lost connection forwarded: %s", got)
	}
}
