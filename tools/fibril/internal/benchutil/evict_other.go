//go:build !linux

package benchutil

import "errors"

// EvictPageCache is only implemented on Linux.
func EvictPageCache(string) error {
	return errors.New("evicting the page cache is only supported on linux")
}
