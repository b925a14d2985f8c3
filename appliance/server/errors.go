package server

import (
	"strings"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/appliance/wire"
)

// CodeOf is the wire code the server answers err with: its class in the
// broker's error catalog (appliance.Catalog).
func CodeOf(err error) wire.ErrorCode { return appliance.ClassOf(err).Wire }

// errorFrame answers request corr with err. An internal error is logged:
// the client sees only that something failed.
func (c *conn) errorFrame(corr uint64, err error) *wire.Error {
	code := CodeOf(err)
	if code == wire.CodeInternal {
		c.log.Error("request failed", "corr", corr, "err", err)
	}
	return &wire.Error{Corr: corr, Code: code, Message: clip(err.Error(), 1024)}
}

func toValidUTF8(s string) string { return strings.ToValidUTF8(s, "") }
