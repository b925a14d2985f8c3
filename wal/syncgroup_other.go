//go:build !linux

package wal

import "github.com/cockroachdb/pebble/v2/vfs"

// fsHandle: only Linux's syncfs reports errors, so elsewhere there is none.
type fsHandle struct{ path string }

func openFSHandle(string) (fsHandle, error) { return fsHandle{}, ErrSyncGroupUnsupported }
func (h *fsHandle) holds(vfs.File) bool     { return false }
func (h *fsHandle) closed() bool            { return true }
func (h *fsHandle) sync() error             { return errGroupClosed }
func (h *fsHandle) close() error            { return nil }
