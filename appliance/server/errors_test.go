package server

import (
	"errors"
	"fmt"
	"testing"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/appliance/wire"
)

func TestCodeOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want wire.ErrorCode
	}{
		{appliance.ErrInvalid, wire.CodeBadRequest},
		{fmt.Errorf("%w: queue name %q", appliance.ErrInvalid, "a b"), wire.CodeBadRequest},
		{appliance.ErrNotFound, wire.CodeNotFound},
		{appliance.ErrModeConflict, wire.CodeConflict},
		{appliance.ErrConflict, wire.CodeConflict},
		{appliance.ErrQueueFull, wire.CodeQueueFull},
		{appliance.ErrDiskFull, wire.CodeDiskFull},
		{appliance.ErrUnavailable, wire.CodeUnavailable},
		{appliance.ErrClosed, wire.CodeUnavailable},
		{appliance.ErrTooLarge, wire.CodeTooLarge},
		{&appliance.StaleTagsError{Tags: []uint64{1}}, wire.CodeStaleTag},
		// A queue that failed to open is unavailable, whatever the cause.
		{fmt.Errorf("%w: queue q failed to open: %w", appliance.ErrUnavailable, appliance.ErrInvalid), wire.CodeUnavailable},
		{errors.New("disk on fire"), wire.CodeInternal},
	} {
		if got := CodeOf(tc.err); got != tc.want {
			t.Errorf("CodeOf(%v) = %s, want %s", tc.err, got, tc.want)
		}
	}
}
